"""The durable pool state file: every pod this pool created, written before anything waits on it.

One worker owns a pool at a time (an exclusive ``flock`` on ``pool.lock``, released by the kernel
if the worker dies). The file holds no secrets: runner tokens are derived on demand from the API
key (see ``tokens.py``); only their SHA-256 is stored, to tell a rotated key from a broken pod.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import uuid
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

PodStatus = Literal["provisioning", "idle", "busy", "terminated"]
KEEP_TERMINATED = 50


class PoolBusyError(RuntimeError):
    """Another live worker holds this pool."""


class PodRecord(BaseModel):
    """One pod as the pool knows it."""

    id: str
    name: str
    gpu_type_id: str
    gpu_count: int
    cost_per_hr: float = Field(ge=0)
    spec_sha256: str
    token_sha256: str
    status: PodStatus = "provisioning"
    created_at: datetime
    ready_at: datetime | None = None
    last_busy_at: datetime | None = None
    terminated_at: datetime | None = None
    terminate_reason: str | None = None
    job_id: str | None = None
    job_started_at: datetime | None = None
    jobs_done: int = 0
    billed_seconds: float = Field(0.0, ge=0, description="Pod time already written to the ledger")
    base_url: str | None = None


class PoolState(BaseModel):
    """``state.json``: the pool's identity and its pods (live ones, plus recently terminated)."""

    pool_id: str
    created_at: datetime
    pods: dict[str, PodRecord] = Field(default_factory=dict)

    def live(self) -> list[PodRecord]:
        return [p for p in self.pods.values() if p.status != "terminated"]

    def pod_for_job(self, job_id: str) -> PodRecord | None:
        return next((p for p in self.live() if p.job_id == job_id), None)


def new_pool_id() -> str:
    return secrets.token_hex(4)


class StateStore:
    """Reads and atomically rewrites ``<dir>/state.json``; ``acquire()`` takes the pool lock."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / "state.json"
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "pool.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise PoolBusyError(f"pool state {self.dir} is held by another running worker") from exc
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> PoolState | None:
        if not self.path.exists():
            return None
        return PoolState.model_validate_json(self.path.read_text())

    def load_or_create(self) -> PoolState:
        state = self.load()
        if state is None:
            state = PoolState(pool_id=new_pool_id(), created_at=datetime.now().astimezone())
            self.save(state)
        return state

    def save(self, state: PoolState) -> None:
        """Write the whole state atomically (fsync + rename), pruning old terminated pods."""
        dead = sorted(
            (p for p in state.pods.values() if p.status == "terminated"),
            key=lambda p: p.terminated_at or p.created_at,
        )
        for old in dead[: max(0, len(dead) - KEEP_TERMINATED)]:
            del state.pods[old.id]
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".state.{uuid.uuid4().hex}.tmp"
        with tmp.open("w") as fh:
            json.dump(json.loads(state.model_dump_json()), fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)
