"""The runner service (docs/gpu-runner-spec.md): auth, idempotent submission, bundle checks, logs,
results, artifacts, eval-secret handling and restarts — with a model-free executor."""

from __future__ import annotations

import inspect
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import uvicorn

from metatrain.fleet import RunnerClient, RunnerRejected, RunnerUnavailable
from metatrain.fleet.archive import pack_bundle
from metatrain.fleet.fake_runner import fake_run_job
from metatrain.fleet.jobhost import JobHost
from metatrain.fleet.service import bind, create_app
from metatrain.jobs import runner as runner_module
from metatrain.jobs.bundle import make_bundle
from metatrain.protocols import ProgressFn
from metatrain.specs import EvalInterface, JobResult, TaskSpec, parse_job_toml

TOKEN = "test-token-" + uuid.uuid4().hex
SECRET = "eval-secret-" + uuid.uuid4().hex
JOB_TOML = """family = "calc_chain"
[train]
model = "smollm2-135m"
max_steps = 3
rollouts_per_example = 2
batch_size = 2
max_tokens = 16
lr = 1e-5
"""


def build_bundle(
    root: Path, job_id: str, env_text: str = "def load_environment(**kw):\n    return None\n"
) -> Path:
    """A real job bundle (make_bundle) with a nested workspace file."""
    tag = uuid.uuid4().hex[:8]
    ws = root / f"ws-{tag}"
    (ws / "data").mkdir(parents=True)
    (ws / "env.py").write_text(env_text)
    (ws / "job.toml").write_text(JOB_TOML)
    (ws / "data" / "examples.jsonl").write_text('{"q": "1+1", "a": "2"}\n')
    # make_bundle reads only these fields; no family plugin needs loading for a bundle
    fields: dict[str, Any] = {"family": "calc_chain", "version": "1.0.0", "budget": "fast", "eval_n": 8}
    fields["eval"] = EvalInterface.model_construct(final_answer_turn=False, max_tokens=64)
    spec = TaskSpec.model_construct(**fields)
    return make_bundle(root / f"bundle-{tag}", ws, parse_job_toml(JOB_TOML), spec, job_id, "run-test")


@attrs.define
class GatedExecutor:
    """``fake_run_job`` behind a gate; records every call and the eval env it was given."""

    gate: threading.Event = attrs.Factory(threading.Event)
    calls: list[str] = attrs.Factory(list)
    eval_envs: list[dict[str, str] | None] = attrs.Factory(list)
    environ_had_secret: list[bool] = attrs.Factory(list)
    crash: bool = False

    def __call__(
        self,
        bundle_dir: Path,
        result_dir: Path,
        device: str = "cpu",
        progress: ProgressFn | None = None,
        train_wall_seconds: float | None = None,
        eval_env: Mapping[str, str] | None = None,
    ) -> JobResult:
        self.calls.append(bundle_dir.parent.name)
        self.eval_envs.append(dict(eval_env) if eval_env else None)
        self.environ_had_secret.append(SECRET in os.environ.values())
        (result_dir / "logs").mkdir(parents=True, exist_ok=True)
        (result_dir / "logs" / "train.stderr.log").write_text("waiting at the gate\n")
        assert self.gate.wait(30), "test never opened the gate"
        if self.crash:
            raise RuntimeError("executor blew up")
        return fake_run_job(bundle_dir, result_dir, device, progress, train_wall_seconds, eval_env)


@attrs.define
class Served:
    url: str
    host: JobHost
    executor: GatedExecutor
    client: RunnerClient


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A runner on a loopback port, served by uvicorn in a thread, with a gated fake executor."""
    monkeypatch.setenv("METATRAIN_FAKE_JOB_SECONDS", "0.2")
    executor = GatedExecutor()
    host = JobHost(tmp_path / "work", run=executor).open()
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(host, TOKEN), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with RunnerClient(url, TOKEN, timeout=10) as client:
        yield Served(url, host, executor, client)
    executor.gate.set()
    server.should_exit = True
    thread.join(10)
    host.close()


def run_to_end(s: Served, job_id: str) -> JobResult:
    s.executor.gate.set()
    return s.client.wait(job_id, poll_seconds=0.05, timeout=20)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


# -- authentication ---------------------------------------------------------------------------------


def test_health_is_open_and_every_other_route_needs_the_token(served: Served, tmp_path: Path) -> None:
    health = httpx.get(f"{served.url}/health").json()
    versions = health.pop("versions")
    assert health == {"status": "ok", "version": "0.1.0", "device": "cpu", "busy": False, "job_id": None}
    versions.pop("prime-rl", None)  # present only where a prime-rl checkout or pin is configured
    assert versions == {
        "metatrain": "0.1.0",
        **{name: version(name) for name in ("verifiers", "trl", "transformers", "torch")},
    }
    bundle = build_bundle(tmp_path, "job-a")
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
        put = httpx.put(f"{served.url}/jobs/job-a", content=pack_bundle(bundle), headers=headers)
        assert put.status_code == 401 and put.headers["www-authenticate"] == "Bearer"
        for path in ("/jobs/job-a", "/jobs/job-a/result", "/jobs/job-a/artifacts", "/jobs/job-a/logs?name=x"):
            assert httpx.get(served.url + path, headers=headers).status_code == 401, path
    assert served.executor.calls == []
    assert not (served.host.work_dir / "jobs" / "job-a").exists()
    with RunnerClient(served.url, "not-the-token-at-all") as wrong, pytest.raises(RunnerRejected) as err:
        wrong.status("job-a")
    assert err.value.status_code == 401 and "bearer token" in err.value.detail
    assert "not-the-token" not in repr(wrong)


def test_versions_report_the_prime_rl_checkout_else_the_exported_pin(tmp_path: Path) -> None:
    from metatrain.fleet.versions import git_head, runner_versions

    sha = "38494ccb4140897b1c9e7a9ba8da59dcd8940d47"
    other = "1" * 40
    repo = tmp_path / "prime-rl"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text(sha + "\n")  # detached, as after `git checkout <commit>`
    assert git_head(repo) == sha
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(other + "\n")
    assert git_head(repo) == other
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    assert git_head(repo) == sha
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    assert git_head(worktree) == sha
    assert git_head(tmp_path / "nowhere") is None

    env = {"METATRAIN_PRIME_RL_DIR": str(repo), "METATRAIN_PRIME_RL_COMMIT": "0123abcd"}
    assert runner_versions(env)["prime-rl"] == sha  # the checkout wins over the exported pin
    env["METATRAIN_PRIME_RL_DIR"] = str(tmp_path / "nowhere")
    assert runner_versions(env)["prime-rl"] == "0123abcd"
    assert "prime-rl" not in runner_versions({"METATRAIN_PRIME_RL_COMMIT": "main; rm -rf /"})
    assert "prime-rl" not in runner_versions({})
    host = JobHost(tmp_path / "work", versions={"metatrain": "0.1.0", "prime-rl": sha})
    assert host.health().versions == {"metatrain": "0.1.0", "prime-rl": sha}


# -- submission -------------------------------------------------------------------------------------


def test_resubmitting_the_same_bundle_never_runs_it_twice(served: Served, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    first = served.client.submit(bundle, "job-a")
    assert first.state == "queued" and len(first.bundle_sha256) == 64
    again = served.client.submit(bundle, "job-a")  # while it is running
    assert again.state in ("queued", "running") and again.bundle_sha256 == first.bundle_sha256
    assert served.client.health().job_id == "job-a"
    events: list[tuple[str, dict[str, Any]]] = []
    served.executor.gate.set()
    result = served.client.wait("job-a", progress=lambda e, d: events.append((e, d)), poll_seconds=0.05)
    assert result.status == "succeeded" and result.job_id == "job-a" and result.train_steps == 3
    after = served.client.submit(bundle, "job-a")
    assert after.state == "succeeded"
    assert served.executor.calls == ["job-a"]
    status = served.client.status("job-a")
    # every progress event reached the callback exactly once, in order
    assert len(events) == status.events_total == len(status.events)
    assert [e.event for e in status.events] == [name for name, _ in events]
    assert [d["name"] for e, d in events if e == "phase"] == [
        "prepare_model",
        "pre_eval",
        "train",
        "post_eval",
    ]
    assert [d["step"] for e, d in events if e == "step"] == [1, 2, 3]
    assert status.phase == "post_eval" and status.finished_at is not None
    assert served.client.status("job-a", since=status.events_total - 1).events == status.events[-1:]
    assert not served.client.health().busy


def test_same_job_id_with_a_different_bundle_is_a_conflict(served: Served, tmp_path: Path) -> None:
    served.client.submit(build_bundle(tmp_path, "job-a"), "job-a")
    other = build_bundle(tmp_path, "job-a", env_text="def load_environment(**kw):\n    return 1\n")
    with pytest.raises(RunnerRejected) as err:
        served.client.submit(other, "job-a")
    assert err.value.status_code == 409 and "different bundle" in err.value.detail
    run_to_end(served, "job-a")
    with pytest.raises(RunnerRejected) as err:
        served.client.submit(other, "job-a")
    assert err.value.status_code == 409
    assert served.executor.calls == ["job-a"]


def test_a_busy_runner_refuses_a_second_job(served: Served, tmp_path: Path) -> None:
    served.client.submit(build_bundle(tmp_path, "job-a"), "job-a")
    second = build_bundle(tmp_path, "job-b")
    with pytest.raises(RunnerRejected) as err:
        served.client.submit(second, "job-b")
    assert err.value.status_code == 409 and "busy with job 'job-a'" in err.value.detail
    with pytest.raises(RunnerRejected) as missing:
        served.client.status("job-b")
    assert missing.value.status_code == 404
    run_to_end(served, "job-a")
    assert served.client.submit(second, "job-b").state == "queued"
    assert served.client.wait("job-b", poll_seconds=0.05).status == "succeeded"
    assert served.executor.calls == ["job-a", "job-b"]


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _bundle_members(bundle: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [
        (tarfile.TarInfo(p.relative_to(bundle).as_posix()), p.read_bytes())
        for p in sorted(bundle.rglob("*"))
        if p.is_file()
    ]


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((tarfile.TarInfo("../escaped.txt"), b"x"), "path traversal"),
        ((tarfile.TarInfo("workspace/../../escaped.txt"), b"x"), "path traversal"),
        ((tarfile.TarInfo("/tmp/escaped-abs.txt"), b"x"), "absolute path"),
        (_link("workspace/secrets", "/etc/passwd", tarfile.SYMTYPE), "link or special file"),
        (_link("workspace/hard", "/etc/passwd", tarfile.LNKTYPE), "link or special file"),
        ((tarfile.TarInfo("notes.txt"), b"x"), "unexpected member"),
        ((tarfile.TarInfo("workspace/unlisted.py"), b"import os"), "does not list"),
        ((tarfile.TarInfo("workspace/env.py"), b"dup"), "duplicate member"),
    ],
)
def test_unsafe_archives_are_rejected(
    served: Served, tmp_path: Path, extra: tuple[tarfile.TarInfo, bytes | None], message: str
) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    body = _tar([*_bundle_members(bundle), extra])
    put = httpx.put(f"{served.url}/jobs/job-a", content=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert put.status_code == 400, put.text
    assert message in put.json()["detail"]
    assert not (served.host.work_dir.parent / "escaped.txt").exists()
    assert not Path("/tmp/escaped-abs.txt").exists()
    assert list((served.host.work_dir / "incoming").iterdir()) == []
    assert list((served.host.work_dir / "jobs").iterdir()) == []
    assert served.executor.calls == []


def test_bad_bundles_are_rejected_with_the_reason(served: Served, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    members = _bundle_members(bundle)
    tampered = [
        (i, b"import os  # changed after hashing\n" if i.name == "workspace/env.py" else d)
        for i, d in members
    ]
    cases = {
        "modified": _tar(tampered),
        "no bundle.json": _tar([(i, d) for i, d in members if i.name != "bundle.json"]),
        "not a readable tar.gz": b"this is not an archive",
    }
    for message, body in cases.items():
        put = httpx.put(
            f"{served.url}/jobs/job-a", content=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert put.status_code == 400 and message in put.json()["detail"], (message, put.text)
    with pytest.raises(RunnerRejected) as err:
        served.client.submit(bundle, "job-other")
    assert err.value.status_code == 400 and "for job 'job-a', not 'job-other'" in err.value.detail
    with pytest.raises(RunnerRejected) as bad_id:
        served.client.submit(bundle, "..hidden")
    assert bad_id.value.status_code == 400 and "invalid job id" in bad_id.value.detail
    assert served.executor.calls == []
    # the accepted form of the same bundle still goes through afterwards
    assert served.client.submit(bundle, "job-a").state == "queued"


# -- logs, results, artifacts -----------------------------------------------------------------------


def test_logs_stream_by_offset(served: Served, tmp_path: Path) -> None:
    served.client.submit(build_bundle(tmp_path, "job-a"), "job-a")
    assert served.client.logs("job-a", "post_eval.log").data == b""  # not written yet: empty, not 404
    while not (served.host.work_dir / "jobs/job-a/result/logs/train.stderr.log").exists():
        time.sleep(0.02)
    head = served.client.logs("job-a", "train.stderr.log", limit=8)
    assert head.data == b"waiting " and head.next_offset == 8
    run_to_end(served, "job-a")
    path = served.host.work_dir / "jobs/job-a/result/logs/train.stderr.log"
    # fake_run_job appends after the gate line: tailing from the old offset yields exactly the rest
    collected, offset = head.data, head.next_offset
    while True:
        chunk = served.client.logs("job-a", "train.stderr.log", offset=offset, limit=7)
        if not chunk.data:
            break
        collected, offset = collected + chunk.data, chunk.next_offset
    assert collected == path.read_bytes() and b"step 3/3" in collected and chunk.size == len(collected)
    with pytest.raises(RunnerRejected) as past:
        served.client.logs("job-a", "train.stderr.log", offset=len(collected) + 1)
    assert past.value.status_code == 416
    with pytest.raises(RunnerRejected) as missing:
        served.client.logs("job-a", "nope.log")
    assert missing.value.status_code == 404 and "pre_eval.log" in missing.value.detail
    with pytest.raises(RunnerRejected) as bad:
        served.client.logs("job-a", "../state.json")
    assert bad.value.status_code == 400


def test_result_and_artifacts(served: Served, tmp_path: Path) -> None:
    served.client.submit(build_bundle(tmp_path, "job-a"), "job-a")
    for call in (
        lambda: served.client.result("job-a"),
        lambda: served.client.download_artifacts("job-a", tmp_path / "x"),
    ):
        with pytest.raises(RunnerRejected) as early:
            call()
        assert early.value.status_code == 409 and "not ready" in early.value.detail
    result = run_to_end(served, "job-a")
    result_dir = served.host.work_dir / "jobs/job-a/result"
    assert result == JobResult.model_validate_json((result_dir / "result.json").read_text())
    assert (
        result.post_score is not None
        and result.pre_score is not None
        and result.post_score > result.pre_score
    )
    light = served.client.download_artifacts("job-a", tmp_path / "light")
    full = served.client.download_artifacts("job-a", tmp_path / "full", include_weights=True)
    rel = {p.relative_to(result_dir) for p in files_under(result_dir)}
    assert {p.relative_to(full) for p in files_under(full)} == rel
    assert {p.relative_to(light) for p in files_under(light)} == {
        p for p in rel if p.parts[:2] != ("train", "model")
    }
    assert Path("train/model/model.safetensors") in rel
    for p in files_under(full):
        assert p.read_bytes() == (result_dir / p.relative_to(full)).read_bytes()
    # the archive is removed by a background task after the body is sent, so allow it a moment
    tmp = served.host.work_dir / "tmp"
    deadline = time.monotonic() + 10
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp.iterdir()) == []


def test_an_executor_crash_is_recorded_as_died(served: Served, tmp_path: Path) -> None:
    served.executor.crash = True
    served.client.submit(build_bundle(tmp_path, "job-a"), "job-a")
    result = run_to_end(served, "job-a")
    assert result.status == "died" and "runner crashed: RuntimeError: executor blew up" in (
        result.error or ""
    )
    assert result.model == "smollm2-135m"
    assert served.client.status("job-a").state == "died"
    assert not served.client.health().busy


# -- the eval secret --------------------------------------------------------------------------------


def test_eval_secret_reaches_only_the_eval_env_and_is_never_stored(served: Served, tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    served.client.submit(bundle, "job-a", eval_secret=SECRET)
    served.client.submit(bundle, "job-a", eval_secret="a-different-secret-ignored")
    result = run_to_end(served, "job-a")
    assert result.status == "succeeded"
    assert served.executor.eval_envs == [{"METATRAIN_EVAL_SECRET": SECRET}]
    assert served.executor.environ_had_secret == [False]  # never put into the runner's own environment
    assert SECRET not in os.environ.values()
    pre = json.loads((served.host.work_dir / "jobs/job-a/result/pre_eval.json").read_text())
    assert pre["eval_env_keys"] == ["METATRAIN_EVAL_SECRET"]
    for path in files_under(served.host.work_dir):
        data = path.read_bytes()
        assert SECRET.encode() not in data and TOKEN.encode() not in data, path
    served.client.download_artifacts("job-a", tmp_path / "art", include_weights=True)
    assert all(SECRET.encode() not in p.read_bytes() for p in files_under(tmp_path / "art"))


def test_run_eval_hands_eval_env_to_the_eval_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``run_eval`` with the evaluation module swapped for a probe of its environment."""
    real_popen = subprocess.Popen
    probe = (
        "import json, os, sys; out = sys.argv[sys.argv.index('--out') + 1]; "
        "print(json.dumps({'event': 'eval_batch', 'done': 1}), flush=True); "
        "json.dump({'score': 0.5, 'secret': os.environ.get('METATRAIN_EVAL_SECRET')}, open(out, 'w'))"
    )

    def popen(cmd: list[str], **kw: Any) -> subprocess.Popen[str]:
        assert cmd[1:3] == ["-m", "metatrain.training.evaluation"]
        return real_popen([cmd[0], "-c", probe, *cmd[3:]], **kw)

    monkeypatch.setattr(runner_module.subprocess, "Popen", popen)
    monkeypatch.delenv("METATRAIN_EVAL_SECRET", raising=False)
    events: list[dict[str, Any]] = []
    args = (tmp_path, "calc_chain", "fast", "cpu")
    with_env = runner_module.run_eval(
        *args,
        tmp_path / "a.json",
        tmp_path / "a.log",
        lambda e, d: events.append(d),
        "pre_eval",
        8,
        eval_env={"METATRAIN_EVAL_SECRET": SECRET},
    )
    without = runner_module.run_eval(
        *args, tmp_path / "b.json", tmp_path / "b.log", lambda e, d: None, "post_eval", 8
    )
    assert with_env["secret"] == SECRET and without["secret"] is None
    assert events == [{"phase": "pre_eval", "done": 1, "total": 8}]
    assert SECRET not in (tmp_path / "a.log").read_text()


def test_run_job_gives_eval_env_to_both_evals_and_nothing_to_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import metatrain.models
    from metatrain.sandbox.runner import SandboxResult

    bundle = build_bundle(tmp_path, "job-a")
    evals: list[tuple[str, Mapping[str, str] | None]] = []
    sandboxed: list[str] = []

    signature = inspect.signature(runner_module.run_eval)

    def fake_eval(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs).arguments
        evals.append((bound["phase"], bound.get("eval_env")))
        return {"score": 0.25, "ci95": [0.0, 0.5], "tool_calls_per_rollout": 1.0}

    def fake_sandbox(policy: Any, target: str, kwargs: dict[str, Any]) -> SandboxResult:
        sandboxed.append(repr(policy) + target + json.dumps(kwargs))
        summary = {"steps": 1, "train_seconds": 1.0, "history": [{"reward": 0.1}]}
        return SandboxResult(True, summary, None, 0, "", "", 1.0, {})

    monkeypatch.setattr(metatrain.models, "prepare_model", lambda name: tmp_path)
    monkeypatch.setattr(runner_module, "run_eval", fake_eval)
    monkeypatch.setattr(runner_module, "run_sandboxed", fake_sandbox)
    result = runner_module.run_job(bundle, tmp_path / "result", eval_env={"METATRAIN_EVAL_SECRET": SECRET})
    assert result.status == "succeeded"
    assert evals == [
        ("pre_eval", {"METATRAIN_EVAL_SECRET": SECRET}),
        ("post_eval", {"METATRAIN_EVAL_SECRET": SECRET}),
    ]
    assert len(sandboxed) == 1 and SECRET not in sandboxed[0]


# -- the real CLI process: restarts, logs, work-dir lock ---------------------------------------------


def start_cli(work: Path, env: dict[str, str], port_file: Path) -> subprocess.Popen[bytes]:
    port_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "metatrain.cli.app",
        "runner",
        "serve",
        "--work-dir",
        str(work),
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--executor",
        "metatrain.fleet.fake_runner:fake_run_job",
    ]
    log = (work.parent / f"server-{uuid.uuid4().hex[:6]}.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not port_file.exists():
        assert proc.poll() is None, f"runner exited with {proc.returncode}"
        assert time.monotonic() < deadline, "runner did not start"
        time.sleep(0.1)
    return proc


def test_cli_runner_survives_restarts_and_keeps_secrets_out_of_disk_and_logs(tmp_path: Path) -> None:
    work, port_file = tmp_path / "work", tmp_path / "port"
    env = {**os.environ, "METATRAIN_RUNNER_TOKEN": TOKEN, "METATRAIN_FAKE_JOB_SECONDS": "600"}
    env.pop("METATRAIN_EVAL_SECRET", None)
    missing = subprocess.run(
        [sys.executable, "-m", "metatrain.cli.app", "runner", "serve", "--work-dir", str(work)],
        env={k: v for k, v in env.items() if k != "METATRAIN_RUNNER_TOKEN"},
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "METATRAIN_RUNNER_TOKEN" in missing.stderr

    proc = start_cli(work, env, port_file)
    url = f"http://127.0.0.1:{port_file.read_text().strip()}"
    client = RunnerClient(url, TOKEN, timeout=10)
    bundle_a, bundle_b = build_bundle(tmp_path, "job-a"), build_bundle(tmp_path, "job-b")
    client.submit(bundle_a, "job-a", eval_secret=SECRET)
    while client.status("job-a").phase != "pre_eval":
        time.sleep(0.1)
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "metatrain.cli.app",
            "runner",
            "serve",
            "--work-dir",
            str(work),
            "--port",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert second.returncode == 2 and "another runner is serving" in second.stderr
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    proc = start_cli(work, {**env, "METATRAIN_FAKE_JOB_SECONDS": "0.3"}, port_file)
    client = RunnerClient(f"http://127.0.0.1:{port_file.read_text().strip()}", TOKEN, timeout=10)
    died = client.result("job-a")
    assert died.status == "died"
    assert "stopped while the job was running (phase pre_eval)" in (died.error or "")
    assert client.submit(bundle_a, "job-a").state == "died"  # resubmission never re-runs
    assert not client.health().busy
    client.submit(bundle_b, "job-b", eval_secret=SECRET)
    done = client.wait("job-b", poll_seconds=0.1, timeout=30)
    assert done.status == "succeeded"
    log_b = client.logs("job-b", "train.stderr.log").data
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after a clean shutdown

    proc = start_cli(work, env, port_file)
    client = RunnerClient(f"http://127.0.0.1:{port_file.read_text().strip()}", TOKEN, timeout=10)
    assert client.result("job-b") == done and client.result("job-a").status == "died"
    assert client.logs("job-b", "train.stderr.log").data == log_b
    assert client.status("job-b").events_total > 0
    client.download_artifacts("job-b", tmp_path / "art")
    assert (tmp_path / "art" / "result.json").is_file()
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)

    server_logs = b"".join(p.read_bytes() for p in tmp_path.glob("server-*.log"))
    assert b"PUT /jobs/job-b" in server_logs and b"metatrain runner on http://127.0.0.1:" in server_logs
    for blob in [server_logs, *(p.read_bytes() for p in files_under(work))]:
        assert TOKEN.encode() not in blob and SECRET.encode() not in blob


# -- client errors ----------------------------------------------------------------------------------


def test_client_tells_unavailable_from_rejected(tmp_path: Path) -> None:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    with RunnerClient(f"http://127.0.0.1:{port}", TOKEN, timeout=2) as down, pytest.raises(RunnerUnavailable):
        down.health()

    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(503, json={"detail": "warming up"})
        return httpx.Response(404, json={"detail": "no job 'x' on this runner"})

    with RunnerClient("http://runner", TOKEN, transport=httpx.MockTransport(broken)) as client:
        with pytest.raises(RunnerUnavailable, match="503: warming up"):
            client.health()
        with pytest.raises(RunnerUnavailable):
            client.wait_ready(timeout=0.2, poll_seconds=0.05)
        with pytest.raises(RunnerRejected) as err:
            client.status("x")
        assert err.value.status_code == 404 and err.value.detail == "no job 'x' on this runner"


def test_wait_rides_out_a_brief_outage(tmp_path: Path) -> None:
    now = "2026-12-03T00:00:00Z"
    event = {"seq": 0, "event": "phase", "data": {"name": "train"}, "at": now}
    base = {"job_id": "x", "bundle_sha256": "0" * 64, "submitted_at": now}
    replies = [
        httpx.Response(503, json={"detail": "restarting"}),
        httpx.Response(200, json={**base, "state": "running", "events": [event], "events_total": 1}),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(200, json={**base, "state": "succeeded", "events": [], "events_total": 1}),
    ]
    result = JobResult(job_id="x", status="succeeded", model="m", device="cpu", post_score=0.5)
    sinces: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/jobs/x/result":
            return httpx.Response(200, content=result.model_dump_json())
        sinces.append(request.url.params.get("since", ""))
        return replies.pop(0)

    seen: list[tuple[str, dict[str, Any]]] = []
    with RunnerClient("http://runner", TOKEN, transport=httpx.MockTransport(flaky)) as client:
        assert client.wait("x", progress=lambda e, d: seen.append((e, d)), poll_seconds=0.01) == result
        assert seen == [("phase", {"name": "train"})] and sinces == ["0", "0", "1", "1"]
        replies.append(httpx.Response(503, json={"detail": "gone"}))
        with pytest.raises(RunnerUnavailable, match="gone"):
            client.wait("x", poll_seconds=0.01, unavailable_grace=0.0)


def test_a_job_with_unreadable_state_is_recovered_as_died(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    work = tmp_path / "work"
    JobHost(work).open().close()
    job_dir = work / "jobs" / "job-a"
    (job_dir / "bundle").mkdir(parents=True)
    (job_dir / "bundle" / "bundle.json").write_bytes((bundle / "bundle.json").read_bytes())
    (job_dir / "state.json").write_text('{"job_id": "job-a", "sta')  # torn write
    host = JobHost(work).open()
    try:
        assert host.status("job-a").state == "died"
        assert host.result("job-a").model == "smollm2-135m"
        with pytest.raises(RuntimeError, match="another runner is serving"):
            JobHost(work).open()
    finally:
        host.close()


def test_pack_bundle_refuses_symlinks(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path, "job-a")
    (bundle / "workspace" / "link.txt").symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match=r"refusing to pack symlink workspace/link\.txt"):
        pack_bundle(bundle)


def test_serve_rejects_bad_options_before_starting(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from metatrain.cli.app import app

    base = ["runner", "serve", "--work-dir", str(tmp_path / "work")]
    for extra, message in (
        (["--device", "gpu"], "is not cpu, cuda or cuda:N"),
        (["--backend", "jax"], "is not one of trl, prime-rl"),
        (["--executor", "no.such.module:run"], "cannot import"),
    ):
        out = CliRunner().invoke(app, base + extra, env={"METATRAIN_RUNNER_TOKEN": TOKEN})
        assert out.exit_code == 2 and message in out.output, out.output
    assert not (tmp_path / "work").exists()


def test_runner_executor_selects_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from metatrain.fleet.jobhost import runner_executor

    calls: list[tuple[Any, ...]] = []

    def fake_run_job(*args: Any, **kwargs: Any) -> str:
        calls.append((*args, kwargs))
        return "done"

    monkeypatch.setattr(runner_module, "run_job", fake_run_job)
    env = {"METATRAIN_EVAL_SECRET": SECRET}
    assert runner_executor("prime-rl")(tmp_path, tmp_path / "r", "cuda", None, 60.0, env) == "done"
    assert calls == [(tmp_path, tmp_path / "r", "cuda", None, 60.0, env, {"backend": "prime-rl"})]
