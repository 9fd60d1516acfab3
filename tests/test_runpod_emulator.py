"""The Runpod emulator speaks the wire protocol the real ``runpod`` SDK (1.12.0) uses.

Every test drives the real SDK through ``RUNPOD_API_BASE_URL``; no network beyond loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from metatrain.fleet.client import RunnerClient, RunnerUnavailable
from metatrain_runpod.api import OutOfStock, RunpodApi, RunpodApiError, Transient, classify
from metatrain_runpod.emulator import OUT_OF_STOCK, Emulator
from metatrain_runpod.graphql_lite import Enum, GraphQLSyntaxError, parse
from metatrain_runpod.pool import pod_is_gone, runner_url

runpod = pytest.importorskip("runpod")
KEY = "emulator-test-key-0123456789"
TOKEN = "runner-token-abcdefghijklmnop"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture
def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    emu = Emulator(api_key=KEY, root=tmp_path / "emu", runner_module="metatrain_runpod.testing_runner")
    monkeypatch.setenv("RUNPOD_API_BASE_URL", emu.start())
    monkeypatch.setattr(runpod, "api_key", KEY)
    yield emu
    emu.close()


def wait_health(client: RunnerClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.health()
            return
        except RunnerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_sdk_round_trip_runs_a_real_runner_per_pod(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)  # in the emulator's env: must not reach the pod
    assert {g["id"] for g in runpod.get_gpus()} >= {H100, H200}
    created = runpod.create_pod(
        "metatrain-test-1",
        "runpod/pytorch:test",
        H200,
        gpu_count=2,
        ports="8000/http",
        docker_args="bash -c 'true'",
        env={"METATRAIN_RUNNER_TOKEN": TOKEN},
    )
    assert set(created) == {"id", "imageName", "env", "machineId", "machine"}  # the SDK's selection
    assert emulator.gpu_types[H200].stock == 6
    pod = runpod.get_pod(created["id"])
    assert pod["name"] == "metatrain-test-1" and pod["desiredStatus"] == "RUNNING"
    assert pod["costPerHr"] == pytest.approx(2 * 3.59)
    assert pod["machine"] == {"gpuDisplayName": "H200 SXM"}
    url = runner_url(pod, 8000, "https://{pod_id}-{port}.proxy.runpod.net")
    assert url is not None and url.startswith("http://127.0.0.1:")
    client = RunnerClient(url, TOKEN, 5.0)
    wait_health(client)
    assert [p["id"] for p in runpod.get_pods()] == [created["id"]]

    proc = emulator.pods[created["id"]].process
    assert proc is not None
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{proc.pid}/environ").read_text().split("\0")
        if "=" in item
    )
    assert environ["METATRAIN_RUNNER_TOKEN"] == TOKEN
    assert environ["RUNPOD_POD_ID"] == created["id"]
    assert "RUNPOD_API_KEY" not in environ

    runpod.terminate_pod(created["id"])
    assert runpod.get_pod(created["id"]) is None
    assert runpod.get_pods() == []
    assert proc.poll() is not None
    assert emulator.gpu_types[H200].stock == 8
    assert emulator.terminated == [created["id"]]
    with pytest.raises(runpod.error.QueryError, match="Pod not found"):
        runpod.terminate_pod(created["id"])


def test_out_of_stock_is_runpods_error_and_maps_to_out_of_stock(emulator: Emulator) -> None:
    emulator.set_stock(H100, 1)
    with pytest.raises(runpod.error.QueryError) as info:
        runpod.create_pod("x", "img", H100, gpu_count=2)
    assert str(info.value) == OUT_OF_STOCK
    assert isinstance(classify(info.value, KEY), OutOfStock)
    with pytest.raises(ValueError, match="No GPU found"):
        runpod.create_pod("x", "img", "NVIDIA Imaginary 1TB")


def test_kill_knob_and_stuck_pods(emulator: Emulator) -> None:
    emulator.stuck_next = 1
    stuck = runpod.create_pod("stuck", "img", H200, gpu_count=1)
    time.sleep(0.2)
    info = runpod.get_pod(stuck["id"])
    assert info["runtime"] is None and info["desiredStatus"] == "RUNNING"
    assert runner_url(info, 8000, "https://{pod_id}-{port}.proxy.runpod.net") is None
    live = runpod.create_pod("live", "img", H200, gpu_count=1, env={"METATRAIN_RUNNER_TOKEN": TOKEN})
    deadline = time.monotonic() + 10
    while runpod.get_pod(live["id"])["runtime"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not pod_is_gone(runpod.get_pod(live["id"]))
    emulator.kill_pod(live["id"])
    dead = runpod.get_pod(live["id"])
    assert dead["desiredStatus"] == "EXITED" and dead["runtime"] is None and pod_is_gone(dead)


@pytest.mark.parametrize("kind", ["http500", "http502", "graphql"])
def test_injected_errors_reach_the_sdk_as_runpod_returns_them(emulator: Emulator, kind: str) -> None:
    emulator.inject_errors(1, kind, only="myself")
    runpod.get_gpus()  # not the targeted root field: unaffected
    with pytest.raises(Exception) as info:
        runpod.get_pods()
    expected = requests.exceptions.JSONDecodeError if kind == "http502" else runpod.error.QueryError
    assert isinstance(info.value, expected)
    assert isinstance(classify(info.value, KEY), Transient)
    assert runpod.get_pods() == []  # the injected error was used up


def test_api_retries_with_backoff_then_fails_clearly(emulator: Emulator) -> None:
    sleeps: list[float] = []
    api = RunpodApi(KEY, attempts=4, backoff_s=0.5, backoff_max_s=1.5, sleep=sleeps.append)
    emulator.inject_errors(2, "http502")
    assert api.list_pods() == []
    assert len(sleeps) == 2 and 0.45 <= sleeps[0] <= 0.55 and 0.9 <= sleeps[1] <= 1.1

    sleeps.clear()
    emulator.inject_errors(10, "http500")
    with pytest.raises(RunpodApiError, match=r"get_pods failed 4 times .*Something went wrong") as info:
        api.list_pods()
    assert KEY not in str(info.value)
    assert len(sleeps) == 3 and sleeps[2] <= 1.5 * 1.1  # capped


def test_wrong_key_is_a_clear_non_retried_error(emulator: Emulator) -> None:
    sleeps: list[float] = []
    api = RunpodApi("not-the-key-000000000", attempts=3, sleep=sleeps.append)
    with pytest.raises(RunpodApiError, match="rejected the API key"):
        api.list_pods()
    assert sleeps == []
    with pytest.raises(RunpodApiError, match="RUNPOD_API_KEY"):
        RunpodApi("")


def test_graphql_errors_have_runpods_shape(emulator: Emulator) -> None:
    url = f"{emulator.base_url}/graphql"
    headers = {"Authorization": f"Bearer {KEY}"}
    bad_field = requests.post(url, json={"query": "query { myself { pods { nope } } }"}, headers=headers)
    assert bad_field.status_code == 200
    body = bad_field.json()
    assert body["data"] == {"myself": None}
    assert body["errors"][0]["message"] == 'Cannot query field "nope" on type "Pod".'
    syntax = requests.post(url, json={"query": "query { myself { "}, headers=headers)
    assert syntax.status_code == 400 and "Syntax Error" in syntax.json()["errors"][0]["message"]
    by_param = requests.post(f"{url}?api_key={KEY}", json={"query": "query { gpuTypes { id } }"})
    assert by_param.status_code == 200 and len(by_param.json()["data"]["gpuTypes"]) == len(emulator.gpu_types)
    assert requests.post(url, json={"query": "query { gpuTypes { id } }"}).status_code == 401


def test_parser_reads_the_sdks_own_mutation() -> None:
    from runpod.api.mutations.pods import generate_pod_deployment_mutation

    text = generate_pod_deployment_mutation(
        "metatrain-ab-1", "img:1", H100, "SECURE", gpu_count=2, env={"A": "x y", "B": "1"}, ports="8000/http"
    )
    op = parse(text)
    assert op.kind == "mutation" and op.fields[0].name == "podFindAndDeployOnDemand"
    spec = op.fields[0].args["input"]
    assert spec["cloudType"] == Enum("SECURE") and spec["gpuCount"] == 2 and spec["dataCenterId"] is None
    assert spec["env"] == [{"key": "A", "value": "x y"}, {"key": "B", "value": "1"}]
    assert [f.name for f in op.fields[0].selections] == ["id", "imageName", "env", "machineId", "machine"]
    with pytest.raises(GraphQLSyntaxError):
        parse('mutation { podTerminate(input: { podId: "x" }')


def test_emulator_runs_standalone_with_http_knobs(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "metatrain_runpod.emulator", "--port", str(port), "--root", str(tmp_path)],
        env={**os.environ, "RUNPOD_EMULATOR_API_KEY": KEY},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        state = requests.post(f"{base}/_emulator/stock", json={"gpu_type_id": H100, "count": 0}).json()
        assert state["stock"][H100] == 0
        assert (
            requests.post(f"{base}/_emulator/stock", json={"gpu_type_id": "nope", "count": 1}).status_code
            == 400
        )
        query = {"query": 'query { gpuTypes(input: {id: "NVIDIA H100 80GB HBM3"}) { id securePrice } }'}
        got = requests.post(f"{base}/graphql", json=query, headers={"Authorization": f"Bearer {KEY}"}).json()
        assert got == {"data": {"gpuTypes": [{"id": H100, "securePrice": 2.69}]}}
        assert requests.get(f"{base}/_emulator/state").json()["calls"] == ["gpuTypes"]
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_runner_url_prefers_a_public_port_then_runpods_proxy() -> None:
    proxy = "https://{pod_id}-{port}.proxy.runpod.net"
    public = {
        "ip": "203.0.113.7",
        "isIpPublic": True,
        "privatePort": 8000,
        "publicPort": 41234,
        "type": "tcp",
    }
    private = {**public, "ip": "10.0.0.5", "isIpPublic": False, "publicPort": 8000, "type": "http"}
    assert (
        runner_url({"id": "abc", "runtime": {"ports": [public]}}, 8000, proxy) == "http://203.0.113.7:41234"
    )
    assert runner_url({"id": "abc", "runtime": {"ports": [private]}}, 8000, proxy) == (
        "https://abc-8000.proxy.runpod.net"
    )
    other_port = {**public, "privatePort": 22}
    assert runner_url({"id": "abc", "runtime": {"ports": [other_port]}}, 8000, proxy) == (
        "https://abc-8000.proxy.runpod.net"
    )
    assert runner_url({"id": "abc", "runtime": None}, 8000, proxy) is None


def test_pods_run_the_real_runner_cli_with_a_selectable_executor(tmp_path: Path) -> None:
    """Default: ``metatrain runner serve`` with the real run_job; ``executor``/``backend`` select others."""
    work = tmp_path / "runner"
    real = Emulator(api_key=KEY, root=tmp_path, runner_module=None)
    cmd = real._runner_command(8123, work)
    assert cmd[:5] == [sys.executable, "-m", "metatrain.cli.app", "runner", "serve"]
    assert "--executor" not in cmd and cmd[cmd.index("--backend") + 1] == "trl"
    assert cmd[cmd.index("--device") + 1] == "cpu" and cmd[cmd.index("--work-dir") + 1] == str(work)
    fake = Emulator(
        api_key=KEY, root=tmp_path, runner_module=None, executor="metatrain.fleet.fake_runner:fake_run_job"
    )
    assert fake._runner_command(8123, work)[-2:] == ["--executor", "metatrain.fleet.fake_runner:fake_run_job"]
    module = Emulator(api_key=KEY, root=tmp_path, runner_module="metatrain_runpod.testing_runner")
    assert module._runner_command(8123, work)[1:3] == ["-m", "metatrain_runpod.testing_runner"]


def test_a_pod_sees_what_the_bootstrap_exports(emulator: Emulator) -> None:
    import base64

    from metatrain_runpod.bootstrap import BOOTSTRAP_ENV, pod_spec, runner_exports
    from metatrain_runpod.config import PoolConfig

    spec = pod_spec(PoolConfig())
    assert runner_exports(spec.script) == {
        "DEBIAN_FRONTEND": "noninteractive",
        "METATRAIN_PRIME_RL_COMMIT": "38494ccb",  # METATRAIN_PRIME_RL_DIR="$PRIME_RL_DIR" is an expansion
    }
    env = {BOOTSTRAP_ENV: base64.b64encode(spec.script.encode()).decode(), "METATRAIN_RUNNER_TOKEN": TOKEN}
    created = runpod.create_pod("metatrain-test-x", "img", H200, gpu_count=1, env=env)
    deadline = time.monotonic() + 30
    while (url := runner_url(runpod.get_pod(created["id"]), 8000, "https://{p}")) is None:
        assert time.monotonic() < deadline, "the pod never got a runtime"
        time.sleep(0.05)
    client = RunnerClient(url, TOKEN, 5.0)
    wait_health(client)
    assert client.health().versions["prime-rl"] == "38494ccb"
