"""The file queue: claims, leases, requeue, one result per job, and recovery after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from metatrain.jobs.queue import FileQueue
from metatrain.jobs.worker import Worker
from metatrain.specs import JobResult


def bundle(tmp_path: Path, name: str = "b") -> Path:
    b = tmp_path / name
    b.mkdir()
    (b / "bundle.json").write_text("{}")
    return b


def ok_result(job_id: str) -> JobResult:
    return JobResult(
        job_id=job_id, status="succeeded", model="m", device="cpu", pre_score=0.1, post_score=0.2
    )


def test_enqueue_is_idempotent_and_claim_is_exclusive(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    assert q.enqueue(bundle(tmp_path), "j1") == "j1"
    q.enqueue(bundle(tmp_path, "b2"), "j1")
    assert q.ids("queued") == ["j1"]
    lease = q.claim("w1", 60)
    assert lease is not None and lease.attempt == 1
    assert q.claim("w2", 60) is None
    assert q.state("j1") == "running"
    q.enqueue(bundle(tmp_path, "b3"), "j1")
    assert q.ids("queued") == []


def test_one_result_per_job(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    q.enqueue(bundle(tmp_path), "j1")
    lease = q.claim("w1", 60)
    assert lease is not None
    assert q.complete(lease, ok_result("j1"))
    assert not q.complete(lease, ok_result("j1").model_copy(update={"post_score": 0.9}))
    result = q.result("j1")
    assert result is not None and result.post_score == 0.2


def test_expired_lease_is_requeued_and_stale_owner_cannot_complete(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    q.enqueue(bundle(tmp_path), "j1")
    stale = q.claim("w1", 0.01)
    assert stale is not None
    time.sleep(0.05)
    assert q.requeue_expired() == ["j1"]
    fresh = q.claim("w2", 60)
    assert fresh is not None and fresh.attempt == 2
    assert not q.complete(stale, ok_result("j1"))
    assert q.complete(fresh, ok_result("j1"))


def test_attempt_cap_records_died(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q", max_attempts=2)
    q.enqueue(bundle(tmp_path), "j1")
    for _ in range(2):
        assert q.claim("w", 0.0) is not None
        time.sleep(0.01)
        q.requeue_expired()
    result = q.result("j1")
    assert result is not None and result.status == "died" and result.attempts == 2


def test_worker_runs_and_records(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    q.enqueue(bundle(tmp_path), "j1")
    seen: list[Path] = []

    def run(b: Path, out: Path) -> JobResult:
        seen.append(b)
        return ok_result(b.name)

    Worker(q, run).drain()
    assert [p.name for p in seen] == ["j1"]
    assert q.state("j1") == "done"


def test_crashing_runner_is_recorded_as_died(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    q.enqueue(bundle(tmp_path), "j1")

    def run(b: Path, out: Path) -> JobResult:
        raise RuntimeError("boom")

    Worker(q, run).drain()
    result = q.result("j1")
    assert result is not None and result.status == "died" and "boom" in (result.error or "")


WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from metatrain.jobs.queue import FileQueue
    from metatrain.jobs.worker import Worker
    from metatrain.specs import JobResult

    def run(bundle, out):
        Path(sys.argv[2]).write_text("started")
        time.sleep(float(sys.argv[3]))
        return JobResult(job_id=bundle.name, status="succeeded", model="m", device="cpu", post_score=0.5)

    Worker(FileQueue(Path(sys.argv[1])), run, lease_seconds=600).drain()
    """
)


def test_kill_minus_nine_mid_job_leaves_a_recoverable_queue(tmp_path: Path) -> None:
    q = FileQueue(tmp_path / "q")
    q.enqueue(bundle(tmp_path), "j1")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    marker = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, str(script), str(q.root), str(marker), "60"])
    deadline = time.time() + 30
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "worker never started the job"
    assert q.state("j1") == "running"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # The lease has 600 s left, but its owner is dead: a new worker requeues and finishes the job.
    marker.unlink()
    done = subprocess.run([sys.executable, str(script), str(q.root), str(marker), "0"], timeout=60)
    assert done.returncode == 0
    result = q.result("j1")
    assert result is not None and result.status == "succeeded" and result.attempts == 2
    assert q.ids("running") == [] and q.ids("queued") == []


@pytest.mark.parametrize("n_workers", [3])
def test_concurrent_workers_run_each_job_once(tmp_path: Path, n_workers: int) -> None:
    q = FileQueue(tmp_path / "q")
    for i in range(6):
        q.enqueue(bundle(tmp_path, f"b{i}"), f"j{i}")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(q.root), str(tmp_path / f"m{w}"), "0.2"])
        for w in range(n_workers)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    assert sorted(q.ids("done")) == [f"j{i}" for i in range(6)]
    assert all((r := q.result(f"j{i}")) is not None and r.attempts == 1 for i in range(6))
