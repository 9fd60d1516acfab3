"""A file-backed job queue: ``queued/ -> running/ -> done/`` by atomic directory renames.

Each job is a directory named by its job id. A running job carries ``lease.json`` (owner, pid,
host, expiry); the owner renews it. ``requeue_expired`` returns jobs whose lease ran out (or whose
owner process is gone) to ``queued/``, up to ``max_attempts``; past that the job is finished as
``died``. ``done/<id>/result/result.json`` is written once: a late result for a job that is
already done is discarded.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

import attrs

from metatrain.specs import JobResult

STATES = ("queued", "running", "done")


class QueueError(Exception):
    pass


@attrs.frozen
class Lease:
    job_id: str
    worker: str
    pid: int
    host: str
    expires_at: float
    attempt: int


def _write_json_atomic(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with tmp.open("w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@attrs.define
class FileQueue:
    """The queue rooted at ``root`` (safe for several worker processes on one filesystem)."""

    root: Path
    max_attempts: int = 3

    def __attrs_post_init__(self) -> None:
        self.root = self.root.resolve()
        for d in (*STATES, "incoming"):
            (self.root / d).mkdir(parents=True, exist_ok=True)

    def path(self, state: str, job_id: str) -> Path:
        return self.root / state / job_id

    def state(self, job_id: str) -> str | None:
        for s in reversed(STATES):
            if self.path(s, job_id).exists():
                return s
        return None

    def enqueue(self, bundle: Path, job_id: str) -> str:
        """Copy a bundle in under ``job_id``; a job id already known is left alone (idempotent)."""
        if self.state(job_id) is not None:
            return job_id
        staging = self.root / "incoming" / f"{job_id}.{uuid.uuid4().hex}"
        shutil.copytree(bundle, staging, symlinks=False)
        (staging / "attempts").write_text("0")
        try:
            os.rename(staging, self.path("queued", job_id))
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
        return job_id

    def ids(self, state: str) -> list[str]:
        d = self.root / state
        return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))

    def claim(self, worker: str, lease_seconds: float) -> Lease | None:
        """Move the oldest queued job to ``running/`` and lease it to ``worker``."""
        for job_id in sorted(self.ids("queued"), key=lambda j: self.path("queued", j).stat().st_mtime):
            try:
                os.rename(self.path("queued", job_id), self.path("running", job_id))
            except (FileNotFoundError, OSError):
                continue  # another worker took it
            attempts_file = self.path("running", job_id) / "attempts"
            attempt = int(attempts_file.read_text() or 0) + 1
            attempts_file.write_text(str(attempt))
            lease = Lease(
                job_id, worker, os.getpid(), socket.gethostname(), time.time() + lease_seconds, attempt
            )
            _write_json_atomic(self.path("running", job_id) / "lease.json", attrs.asdict(lease))
            return lease
        return None

    def lease(self, job_id: str) -> Lease | None:
        try:
            return Lease(**json.loads((self.path("running", job_id) / "lease.json").read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def renew(self, lease: Lease, lease_seconds: float) -> Lease | None:
        """Extend a lease still held by its owner; None if the job was taken away."""
        current = self.lease(lease.job_id)
        if current is None or current.worker != lease.worker:
            return None
        renewed = attrs.evolve(current, expires_at=time.time() + lease_seconds)
        _write_json_atomic(self.path("running", lease.job_id) / "lease.json", attrs.asdict(renewed))
        return renewed

    def complete(self, lease: Lease, result: JobResult, result_dir: Path | None = None) -> bool:
        """Record the job's one result and move it to ``done/``; False if it was already done/reassigned."""
        current = self.lease(lease.job_id)
        if current is None or current.worker != lease.worker or self.path("done", lease.job_id).exists():
            return False
        running = self.path("running", lease.job_id)
        out = running / "result"
        if result_dir is not None and result_dir.exists() and result_dir.resolve() != out.resolve():
            shutil.copytree(result_dir, out, dirs_exist_ok=True)
        out.mkdir(exist_ok=True)
        _write_json_atomic(out / "result.json", json.loads(result.model_dump_json()))
        try:
            os.rename(running, self.path("done", lease.job_id))
        except OSError:
            return False
        return True

    def requeue_expired(self, now: float | None = None) -> list[str]:
        """Return dead or expired running jobs to the queue (or finish them as died)."""
        now = time.time() if now is None else now
        moved: list[str] = []
        for job_id in self.ids("running"):
            running = self.path("running", job_id)
            lease = self.lease(job_id)
            if lease is None:
                if now - running.stat().st_mtime < 30:
                    continue  # just claimed; lease being written
                attempt = int((running / "attempts").read_text() or 0)
            else:
                owner_dead = lease.host == socket.gethostname() and not _pid_alive(lease.pid)
                if lease.expires_at > now and not owner_dead:
                    continue
                attempt = lease.attempt
            (running / "lease.json").unlink(missing_ok=True)
            shutil.rmtree(running / "result", ignore_errors=True)
            if attempt >= self.max_attempts:
                result = JobResult(
                    job_id=job_id,
                    status="died",
                    model="?",
                    device="?",
                    attempts=attempt,
                    error=f"the worker died or lost its lease {attempt} times",
                )
                (running / "result").mkdir()
                _write_json_atomic(running / "result" / "result.json", json.loads(result.model_dump_json()))
                target = "done"
            else:
                target = "queued"
            try:
                os.rename(running, self.path(target, job_id))
                moved.append(job_id)
            except OSError:
                continue
        return moved

    def result(self, job_id: str) -> JobResult | None:
        path = self.path("done", job_id) / "result" / "result.json"
        return JobResult.model_validate_json(path.read_text()) if path.exists() else None
