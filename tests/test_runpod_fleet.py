"""The Runpod fleet end to end against the emulator, with the real ``runpod`` SDK.

Each emulated pod runs the real runner service (``metatrain.fleet``) with a fast fake executor
(``metatrain_runpod.testing_runner``), so no model loads. Covered: provisioning, GPU-ladder
fallback, dispatch, results in the local provider's layout, costs, reaping (idle, stuck,
orphans by tag), version pinning, pods killed mid-job, the worker killed with SIGKILL and
restarted, and persistent API errors.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import attrs
import pytest
from typer.testing import CliRunner

import metatrain
from metatrain.costs import read_costs
from metatrain.jobs.bundle import sha256_file
from metatrain.jobs.queue import FileQueue
from metatrain.specs import BundleManifest, JobResult, parse_job_toml
from metatrain_runpod.api import RunpodApiError
from metatrain_runpod.bootstrap import pod_spec
from metatrain_runpod.config import PoolConfig, load_pool_config
from metatrain_runpod.emulator import OUT_OF_STOCK, Emulator
from metatrain_runpod.pool import Pool, ProvisioningError
from metatrain_runpod.provider import RunpodProvider
from metatrain_runpod.state import PodRecord, PoolState, StateStore
from metatrain_runpod.testing_runner import fake_run_job
from metatrain_runpod.tokens import runner_token

runpod = pytest.importorskip("runpod")
KEY = "fleet-test-api-key-0123456789"
EVAL_SECRET = "eval-secret-for-the-fleet-test"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
BASE_CONFIG: dict[str, Any] = {
    "max_pods": 2,
    "poll_interval_s": 0.05,
    "api_attempts": 3,
    "api_backoff_s": 0.01,
    "api_backoff_max_s": 0.05,
    "provision_timeout_s": 30,
    "unreachable_grace_s": 10,
    "lease_seconds": 30,
    "runner_timeout_s": 5,
}


@attrs.define
class FleetEnv:
    """An emulated Runpod account, a queue under ``root/runs`` and the fake executor's log."""

    emu: Emulator
    root: Path
    bundles: Callable[[int, str], list[tuple[Path, str]]]

    @property
    def queue_root(self) -> Path:
        return self.root / "runs" / "queue"

    @property
    def exec_log(self) -> Path:
        return self.root / "exec.log"

    def config(self, **overrides: Any) -> Path:
        cfg = {**BASE_CONFIG, **overrides}
        lines = [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
        lines += [
            "[[gpu_ladder]]",
            f'id = "{H100}"',
            "count = 2",
            "[[gpu_ladder]]",
            f'id = "{H200}"',
            "count = 2",
        ]
        path = self.root / "pool.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def provider(self, **overrides: Any) -> RunpodProvider:
        return RunpodProvider(queue_root=self.queue_root, config_path=self.config(**overrides))

    def execs(self) -> list[list[str]]:
        return (
            [line.split() for line in self.exec_log.read_text().splitlines()]
            if self.exec_log.exists()
            else []
        )

    def state(self) -> PoolState:
        state = StateStore(self.root / "runs" / "fleet" / "runpod").load()
        assert state is not None
        return state

    def enqueue(self, n: int, prefix: str) -> list[str]:
        q = FileQueue(self.queue_root)
        return [q.enqueue(bundle, job_id) for bundle, job_id in self.bundles(n, prefix)]


JOB_TOML = """family = "calc_chain"
environment = "env.py"

[train]
model = "smollm2-135m"
max_steps = 2
rollouts_per_example = 4
batch_size = 2
max_tokens = 64
lr = 1e-5
"""


def make_test_bundle(dest: Path, job_id: str, run_id: str) -> Path:
    """A verifiable job bundle (what ``jobs.bundle.make_bundle`` writes), without loading a family."""
    ws = dest / "workspace"
    ws.mkdir(parents=True)
    (ws / "job.toml").write_text(JOB_TOML)
    (ws / "env.py").write_text("def load_environment(**kwargs):\n    raise NotImplementedError\n")
    manifest = BundleManifest(
        job_id=job_id,
        run_id=run_id,
        family="calc_chain",
        family_version="test",
        budget="fast",
        eval_n=8,
        job=parse_job_toml(JOB_TOML),
        files={f"workspace/{p.name}": sha256_file(p) for p in sorted(ws.iterdir())},
        created_at=datetime.now().astimezone(),
        metatrain_version=metatrain.__version__,
    )
    (dest / "bundle.json").write_text(manifest.model_dump_json(indent=2))
    return dest


@pytest.fixture
def fleet_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetEnv]:
    def bundles(n: int, prefix: str) -> list[tuple[Path, str]]:
        return [
            (
                make_test_bundle(
                    tmp_path / "bundles" / f"{prefix}-{i}", f"{prefix}-{i}", f"run-{prefix}-{i}"
                ),
                f"{prefix}-{i}",
            )
            for i in range(n)
        ]

    emu = Emulator(
        api_key=KEY,
        root=tmp_path / "emu",
        runner_module="metatrain_runpod.testing_runner",
        extra_pod_env={
            "METATRAIN_FAKE_EXEC_LOG": str(tmp_path / "exec.log"),
            "METATRAIN_FAKE_JOB_SECONDS": "0.4",
        },
    )
    monkeypatch.setenv("RUNPOD_API_BASE_URL", emu.start())
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv("METATRAIN_EVAL_SECRET", EVAL_SECRET)
    yield FleetEnv(emu, tmp_path, bundles)
    emu.close()


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return value


def starts(env: FleetEnv) -> Counter[str]:
    return Counter(e[1] for e in env.execs() if e[0] == "start")


def ends(env: FleetEnv) -> Counter[str]:
    return Counter(e[1] for e in env.execs() if e[0] == "end")


def result_files(result_dir: Path) -> set[str]:
    return {str(p.relative_to(result_dir)) for p in result_dir.rglob("*") if p.is_file()}


def test_fleet_provisions_down_the_ladder_runs_jobs_and_bills_them(
    fleet_env: FleetEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = fleet_env
    env.emu.set_stock(H100, 0)
    jobs = env.enqueue(3, "job")
    caplog.set_level("DEBUG")
    provider = env.provider(download_weights=True)
    provider.drain(once=True)

    q = FileQueue(env.queue_root)
    assert q.ids("done") == sorted(jobs) and not q.ids("queued") and not q.ids("running")
    for job_id in jobs:
        result = q.result(job_id)
        assert result is not None and result.status == "succeeded" and result.attempts == 1
    assert starts(env) == ends(env) == Counter(jobs)  # each job ran exactly once
    assert all(
        "eval_secret=yes" in " ".join(e) and e[-1] == "leaked=" for e in env.execs() if e[0] == "start"
    )

    # Ladder: every H100 request was out of stock, then H200; the cap held at 2 pods.
    h100 = [outcome for gpu, outcome in env.emu.deployments if gpu == H100]
    h200 = [outcome for gpu, outcome in env.emu.deployments if gpu == H200]
    assert h100 and set(h100) == {OUT_OF_STOCK} and len(h200) == 2
    assert env.emu.live_pods() == [] and sorted(env.emu.terminated) == sorted(h200)

    # State: every pod recorded, terminated, on H200 at $7.18/h; no secret in clear anywhere.
    state = env.state()
    assert sorted(state.pods) == sorted(h200)
    assert all(p.status == "terminated" and p.cost_per_hr == pytest.approx(7.18) for p in state.pods.values())
    assert sum(p.jobs_done for p in state.pods.values()) == 3
    tokens = [runner_token(KEY, p.name) for p in state.pods.values()]
    ledger = env.root / "runs" / "costs.jsonl"
    texts = [
        (env.root / "runs" / "fleet" / "runpod" / "state.json").read_text(),
        ledger.read_text(),
        caplog.text,
    ]
    for secret in [KEY, EVAL_SECRET, *tokens]:
        assert not any(secret in text for text in texts)
        assert not any(
            secret in p.read_text(errors="ignore") for p in env.queue_root.rglob("*") if p.is_file()
        )

    # Costs: job time billed to each job's run, the rest to the pool; together exactly the pods' time.
    records = read_costs(ledger)
    assert {r.model for r in records} == {f"runpod:{H200} x2"}
    assert {r.run_id for r in records} == {f"run-{j}" for j in jobs} | {f"fleet-{state.pool_id}"}
    lifetime = sum(
        p.cost_per_hr * ((p.terminated_at or p.created_at) - p.created_at).total_seconds() / 3600
        for p in state.pods.values()
    )
    assert sum(r.usd for r in records) == pytest.approx(lifetime, rel=1e-6)

    # The same bundle through the local provider gives the same result layout and schema.
    from metatrain.default_plugins import local_provider

    monkeypatch.setattr(local_provider, "run_job", fake_run_job)
    monkeypatch.setenv("METATRAIN_FAKE_JOB_SECONDS", "0.4")  # as on the pods
    local = local_provider.LocalProvider(queue_root=env.root / "local" / "queue")
    bundle = q.path("done", jobs[0])
    local.submit(bundle, jobs[0])
    local_result = local.wait(jobs[0])
    fleet_dir, local_dir = provider.result_dir(jobs[0]), local.result_dir(jobs[0])
    assert result_files(fleet_dir) == result_files(local_dir)
    assert {"pre_eval.json", "post_eval.json", "train/metrics.jsonl", "result.json"} <= result_files(
        local_dir
    )
    fleet_json = json.loads((fleet_dir / "result.json").read_text())
    local_json = json.loads((local_dir / "result.json").read_text())
    assert fleet_json.keys() == local_json.keys()
    volatile = {"started_at", "finished_at", "timing"}
    assert {k: v for k, v in fleet_json.items() if k not in volatile} == {
        k: v for k, v in local_result.model_dump(mode="json").items() if k not in volatile
    }


def test_pod_killed_mid_job_is_requeued_then_recorded_died(fleet_env: FleetEnv) -> None:
    env = fleet_env
    env.emu.extra_pod_env["METATRAIN_FAKE_JOB_SECONDS"] = "3"
    once, always = env.enqueue(1, "killed-once")[0], env.enqueue(1, "killed-always")[0]
    killed: list[tuple[str, str]] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.wait(0.05):
            for kind, job, pod in ((e[0], e[1], e[2]) for e in env.execs()):
                if kind != "start" or (job, pod) in killed or pod not in env.emu.pods:
                    continue
                if job == always or (job == once and not any(j == once for j, _ in killed)):
                    env.emu.kill_pod(pod)
                    killed.append((job, pod))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        fleet = env.provider().fleet()
        fleet.queue = FileQueue(env.queue_root, max_attempts=2)
        fleet.run(once=True)
    finally:
        stop.set()
        thread.join()

    q = FileQueue(env.queue_root)
    ok, died = q.result(once), q.result(always)
    assert ok is not None and ok.status == "succeeded" and ok.attempts == 2
    assert died is not None and died.status == "died" and died.attempts == 2
    assert died.error is not None and "died on attempt 2/2" in died.error and "pod died" in died.error
    assert starts(env) == Counter({once: 2, always: 2}) and ends(env) == Counter({once: 1})
    assert Counter(j for j, _ in killed) == Counter({once: 1, always: 2})
    state = env.state()
    dead = {pod for _, pod in killed}
    assert all("pod died" in (state.pods[p].terminate_reason or "") for p in dead)
    assert env.emu.live_pods() == []


def test_pod_dying_during_submission_costs_the_attempt(
    fleet_env: FleetEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner took the job, then died before answering the PUT: that attempt is spent."""
    from metatrain.fleet.client import RunnerClient, RunnerUnavailable

    env = fleet_env
    env.emu.extra_pod_env["METATRAIN_FAKE_JOB_SECONDS"] = "3"
    (job,) = env.enqueue(1, "dies-on-put")
    submit = RunnerClient.submit

    def submit_then_die(self: RunnerClient, *args: Any, **kwargs: Any) -> Any:
        submit(self, *args, **kwargs)
        (pod,) = env.emu.live_pods()  # max_pods=1: the pod that just took the job
        env.emu.kill_pod(pod)
        raise RunnerUnavailable("PUT: Server disconnected without sending a response.")

    monkeypatch.setattr(RunnerClient, "submit", submit_then_die)
    fleet = env.provider(max_pods=1).fleet()
    fleet.queue = FileQueue(env.queue_root, max_attempts=2)
    fleet.run(once=True)

    died = FileQueue(env.queue_root).result(job)
    assert died is not None and died.status == "died" and died.attempts == 2
    assert died.error is not None and "pod died" in died.error
    assert starts(env)[job] <= 2 and not ends(env)  # never a third run, never a finished one
    assert env.emu.live_pods() == []


def test_stuck_pod_replaced_idle_pod_reaped_and_fleet_status(fleet_env: FleetEnv) -> None:
    env = fleet_env
    env.emu.stuck_next = 1
    (job,) = env.enqueue(1, "solo")
    provider = env.provider(provision_timeout_s=5.0, idle_reap_s=2.5, max_pods=1)
    stop = threading.Event()
    worker = threading.Thread(target=provider.drain, kwargs={"once": False, "stop": stop})
    worker.start()
    try:
        wait_for(lambda: FileQueue(env.queue_root).state(job) == "done", 30, "the job")
        stuck, served = (pod for _, pod in env.emu.deployments)
        state = env.state()
        assert "stuck provisioning" in (state.pods[stuck].terminate_reason or "")
        assert state.pods[served].status == "idle" and env.emu.live_pods() == [served]

        from metatrain.cli.app import app

        out = CliRunner().invoke(
            app, ["fleet", "status", "--queue", str(env.queue_root)], env={"COLUMNS": "200"}
        )
        assert out.exit_code == 0, out.output
        assert served in out.output and "idle" in out.output and "$5.38" in out.output
        assert "1 succeeded" in out.output and "spend: $" in out.output

        wait_for(lambda: env.state().pods[served].status == "terminated", 15, "the idle pod to be reaped")
        assert worker.is_alive() and env.emu.live_pods() == []  # reaped by the running worker
        assert "idle for" in (env.state().pods[served].terminate_reason or "")
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive()


def test_start_reaps_orphans_by_tag_and_retires_ghosts(fleet_env: FleetEnv) -> None:
    env = fleet_env
    store = StateStore(env.root / "runs" / "fleet" / "runpod")
    state = store.load_or_create()
    ghost = {
        "id": "ghostpod000001",
        "name": f"metatrain-{state.pool_id}-ghost",
        "gpu_type_id": H200,
        "gpu_count": 2,
        "cost_per_hr": 7.18,
        "spec_sha256": "x",
        "token_sha256": "y",
        "status": "idle",
        "created_at": state.created_at,
    }
    state.pods["ghostpod000001"] = PodRecord.model_validate(ghost)
    store.save(state)
    runpod.api_key = KEY
    orphan = runpod.create_pod(f"metatrain-{state.pool_id}-orphan", "img", H200, gpu_count=1)["id"]
    foreign = runpod.create_pod("metatrain-0therp00l-x", "img", H200, gpu_count=1)["id"]

    env.provider().drain(once=True)  # empty queue: recovery, then shutdown

    assert env.emu.terminated == [orphan] and env.emu.live_pods() == [foreign]
    retired = env.state().pods["ghostpod000001"]
    assert retired.status == "terminated" and retired.terminate_reason == "gone while no worker watched it"


@pytest.mark.parametrize(
    ("knob", "value", "reason"),
    [
        ("METATRAIN_FAKE_RUNNER_VERSION", "9.9.9", f"metatrain 9.9.9 (pinned {metatrain.__version__})"),
        ("METATRAIN_FAKE_RUNNER_VERSIONS", '{"verifiers": "0.1.14"}', "verifiers 0.1.14 (pinned 0.2.1)"),
        ("METATRAIN_FAKE_RUNNER_VERSIONS", '{"prime-rl": "0123abcd"}', "prime-rl 0123abcd (pinned 38494ccb)"),
        ("METATRAIN_FAKE_RUNNER_VERSIONS", '{"trl": "0.0.1"}', f"trl 0.0.1 (pinned {version('trl')})"),
    ],
)
def test_runner_version_mismatch_terminates_the_pod_and_stops_runaway_provisioning(
    fleet_env: FleetEnv, knob: str, value: str, reason: str
) -> None:
    env = fleet_env
    env.emu.extra_pod_env[knob] = value
    pool: Pool = env.provider(max_failed_starts=1).fleet().pool
    assert pool.config.pins.trl == version("trl")  # the pool pins this machine's trl by default
    pool.start()
    try:
        pod = pool.provision()
        assert pod is not None
        with pytest.raises(ProvisioningError, match="1 pods in a row never became usable"):
            wait_for(lambda: pool.check_provisioning(pod), 30, "the version check")
        assert pod.record.status == "terminated"
        assert pod.record.terminate_reason == f"version mismatch: runner reports {reason}"
        assert env.emu.live_pods() == []
    finally:
        pool.shutdown()


def test_a_replica_reports_the_pinned_versions_and_is_taken(fleet_env: FleetEnv) -> None:
    """The emulated pod's runner sees the bootstrap's exported prime-rl commit and reports it."""
    pool: Pool = fleet_env.provider().fleet().pool
    pool.start()
    try:
        pod = pool.provision()
        assert pod is not None
        wait_for(lambda: pool.check_provisioning(pod) or pod.record.status == "idle", 30, "the pod")
        assert pod.client is not None
        versions = pod.client.health().versions
        assert versions["prime-rl"] == "38494ccb" and versions["verifiers"] == "0.2.1"
        assert versions["metatrain"] == metatrain.__version__
        assert {"trl", "transformers", "torch"} <= set(versions)
    finally:
        pool.shutdown()
    assert fleet_env.emu.live_pods() == []


def test_pin_mismatches_rules() -> None:
    from metatrain.specs import RunnerHealth
    from metatrain_runpod.config import Pins
    from metatrain_runpod.pool import pin_mismatches

    pins = Pins(metatrain="0.1.0", verifiers="0.2.1", trl="1.16.0", transformers=None, torch="2.13.0")
    full = {
        "metatrain": "0.1.0",
        "verifiers": "0.2.1",
        "prime-rl": "38494ccb4140897b1c9e7a9ba8da59dcd8940d47",  # the full commit matches the short pin
        "trl": "1.16.0",
        "transformers": "4.0.0",  # not pinned: not checked
        "torch": "2.13.0+cu128",  # a pin without a build tag ignores the report's
    }

    def health(**versions: str) -> RunnerHealth:
        return RunnerHealth(version="0.1.0", device="cuda", busy=False, versions=versions)

    assert pin_mismatches(pins, health(**full)) == []
    assert pin_mismatches(pins, health(**{**full, "prime-rl": "38494cc0ffee"})) == [
        "prime-rl 38494cc0ffee (pinned 38494ccb)"
    ]
    assert pin_mismatches(pins.model_copy(update={"torch": "2.13.0+cu126"}), health(**full)) == [
        "torch 2.13.0+cu128 (pinned 2.13.0+cu126)"
    ]
    # A runner that predates `versions` is checked on its metatrain version and misses every other pin.
    old = RunnerHealth(version="0.1.0", device="cuda", busy=False)
    assert pin_mismatches(pins, old) == [
        "verifiers not reported (pinned 0.2.1)",
        "prime-rl not reported (pinned 38494ccb)",
        "trl not reported (pinned 1.16.0)",
        "torch not reported (pinned 2.13.0)",
    ]


def test_transient_api_errors_are_retried_persistent_ones_fail_clearly(fleet_env: FleetEnv) -> None:
    env = fleet_env
    provider = env.provider()
    ((bundle, job),) = env.bundles(1, "flaky")
    provider.submit(bundle, job)
    env.emu.inject_errors(2, "http502")
    env.emu.inject_errors(2, "graphql", only="podFindAndDeployOnDemand")
    result = provider.wait(job)  # the episode loop's path: a worker runs until this job is done
    assert result.status == "succeeded" and result == FileQueue(env.queue_root).result(job)
    assert env.emu.live_pods() == []

    (late,) = env.enqueue(1, "down")
    env.emu.inject_errors(1000, "http500")
    with pytest.raises(RunpodApiError, match=r"Runpod API get_pods failed 3 times .*Something went wrong"):
        env.provider().drain(once=True)
    assert FileQueue(env.queue_root).state(late) == "queued"  # not lost


def test_worker_command_local_provider_and_option_errors(
    fleet_env: FleetEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metatrain.cli.app import app
    from metatrain.jobs import runner

    monkeypatch.setattr(runner, "run_job", fake_run_job)
    (job,) = fleet_env.enqueue(1, "local")
    queue = str(fleet_env.queue_root)
    cli = CliRunner()
    out = cli.invoke(app, ["worker", "--provider", "local", "--once", "--queue", queue])
    assert out.exit_code == 0, out.output
    result = FileQueue(fleet_env.queue_root).result(job)
    assert result is not None and result.status == "succeeded"
    refused = cli.invoke(app, ["worker", "--provider", "local", "--max-pods", "2", "--queue", queue])
    assert refused.exit_code == 2 and "does not take --max-pods" in refused.output
    unknown = cli.invoke(app, ["worker", "--provider", "nope", "--queue", queue])
    assert unknown.exit_code == 2 and "no compute provider named 'nope'" in unknown.output


def test_bootstrap_pins_every_pod_to_the_same_versions(tmp_path: Path) -> None:
    config = PoolConfig()
    spec = pod_spec(config)
    assert spec == pod_spec(PoolConfig()) and spec.sha256 == pod_spec(PoolConfig()).sha256  # replicas
    script = base64.b64decode(spec.env["METATRAIN_BOOTSTRAP"]).decode()
    assert script == spec.script
    for pin in (
        "checkout --quiet 38494ccb",
        "rev-list -n 1 v0.6.0",
        "verifiers==0.2.1",
        f"/opt/metatrain-wheels/metatrain-{metatrain.__version__}-py3-none-any.whl",
        f"/opt/metatrain-wheels/metatrain_families-{metatrain.__version__}-py3-none-any.whl",
    ):
        assert pin in script
    assert "install --quiet metatrain" not in script  # never the unrelated 'metatrain' on PyPI
    assert "--token-env METATRAIN_RUNNER_TOKEN" in script and "METATRAIN_RUNNER_TOKEN" not in spec.env
    assert spec.ports == "8000/http" and '"' not in spec.docker_args and "\\" not in spec.docker_args
    other = pod_spec(PoolConfig.model_validate({"pins": {"verifiers": "0.2.2"}}))
    assert other.sha256 != spec.sha256
    with pytest.raises(ValueError, match="quote"):
        pod_spec(PoolConfig(extra_env={"X": 'say "hi"'}))
    with pytest.raises(ValueError, match="more than once"):
        PoolConfig.model_validate({"gpu_ladder": [{"id": H100}, {"id": H100}]})
    with pytest.raises(ValueError, match="prime_rl_commit"):
        PoolConfig.model_validate({"pins": {"prime_rl_commit": "main; rm -rf /"}})
    path = tmp_path / "pool.toml"
    path.write_text('max_pods = 3\n[[gpu_ladder]]\nid = "NVIDIA L40S"\ncount = 1\n')
    loaded = load_pool_config(path, max_pods=5)
    assert loaded.max_pods == 5 and [(g.id, g.count) for g in loaded.gpu_ladder] == [("NVIDIA L40S", 1)]


def bootstrap_part(script: str, start: str, end: str) -> str:
    """The lines of ``script`` from the one starting with ``start`` up to (not including) ``end``."""
    lines = script.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(i for i, line in enumerate(lines) if i > first and line.startswith(end))
    return "\n".join(lines[first:last]) + "\n"


def run_backend_choice(script: str, gpus: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the bootstrap's backend lines with a fake ``nvidia-smi`` that lists ``gpus`` GPUs."""
    bin_dir = tmp_path / f"bin-{gpus}"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\\n" for i in range(gpus))
    smi.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    smi.chmod(0o755)
    part = bootstrap_part(script, "# training backend", "export METATRAIN_PRIME_RL_DIR")
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail\n{part}echo "$BACKEND"'],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )


def test_bootstrap_picks_the_training_backend(tmp_path: Path) -> None:
    auto = pod_spec(PoolConfig()).script
    assert auto.rstrip().endswith('--device cuda --backend "$BACKEND"')
    for gpus, backend in ((1, "trl"), (2, "prime-rl"), (4, "prime-rl")):
        out = run_backend_choice(auto, gpus, tmp_path)
        assert (out.returncode, out.stdout.strip()) == (0, backend), out.stderr
    none = run_backend_choice(auto, 0, tmp_path)
    assert none.returncode == 1 and "nvidia-smi lists no GPU" in none.stderr

    fixed = pod_spec(PoolConfig(backend="trl")).script
    assert "BACKEND=trl\n" in fixed and "nvidia-smi" not in fixed
    assert pod_spec(PoolConfig(backend="trl")).sha256 != pod_spec(PoolConfig()).sha256  # not replicas
    assert "BACKEND=prime-rl\n" in pod_spec(PoolConfig(backend="prime-rl")).script
    mixed = [{"id": H100}, {"id": "NVIDIA L40S", "count": 1}]
    with pytest.raises(ValueError, match=r"backend 'prime-rl' needs at least 2 GPUs per pod.*NVIDIA L40S x1"):
        PoolConfig.model_validate({"backend": "prime-rl", "gpu_ladder": mixed})
    with pytest.raises(ValueError, match="backend"):
        PoolConfig.model_validate({"backend": "jax"})


def test_bootstrap_checks_every_pinned_version(tmp_path: Path) -> None:
    """The rendered version check, run with this machine's packages: passes at the pins, names a drift."""

    def check(config: PoolConfig) -> subprocess.CompletedProcess[str]:
        script = pod_spec(config).script
        code = bootstrap_part(script, "from importlib.metadata", "CHECK")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    ok = check(PoolConfig.model_validate({"pins": {"torch": version("torch").split("+")[0]}}))
    assert ok.returncode == 0, ok.stderr
    drift = check(PoolConfig.model_validate({"pins": {"transformers": "4.0.0"}}))
    assert drift.returncode == 1 and "version mismatch" in drift.stderr
    assert "'transformers': '4.0.0'" in drift.stderr


def test_worker_killed_with_sigkill_and_restarted(fleet_env: FleetEnv) -> None:
    env = fleet_env
    env.emu.extra_pod_env["METATRAIN_FAKE_JOB_SECONDS"] = "2.5"
    jobs = env.enqueue(3, "crash")
    cmd = [sys.executable, "-m", "metatrain.cli.app", "worker", "--provider", "runpod", "--once"]
    cmd += ["--queue", str(env.queue_root), "--max-pods", "2", "--config", str(env.config())]
    penv = {**os.environ, "COLUMNS": "200"}

    first = subprocess.Popen(cmd, env=penv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: starts(env), 60, "a job to start on a pod")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert env.emu.live_pods()  # the dead worker left paid pods behind...
    assert FileQueue(env.queue_root).ids("running")

    # Restart without --once: it adopts the pods, finishes the jobs, and SIGTERM stops it cleanly.
    second = subprocess.Popen(
        [a for a in cmd if a != "--once"], env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: len(FileQueue(env.queue_root).ids("done")) == 3, 60, "the jobs to finish")
        assert env.emu.live_pods()  # warm pool kept while the worker runs
    finally:
        second.send_signal(signal.SIGTERM)
        stdout, stderr = second.communicate(timeout=30)
    assert second.returncode == 0, stderr[-3000:]
    assert "adopting pod" in stderr
    q = FileQueue(env.queue_root)
    assert q.ids("done") == sorted(jobs)
    results = [q.result(j) for j in jobs]
    assert all(isinstance(r, JobResult) and r.status == "succeeded" for r in results)
    assert starts(env) == ends(env) == Counter(jobs)  # nothing lost, nothing run twice
    assert env.emu.live_pods() == []  # ...and the restarted worker cleaned them up
    assert all(p.status == "terminated" for p in env.state().pods.values())
    assert KEY not in stdout + stderr
