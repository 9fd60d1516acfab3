"""A queue worker: claims jobs, keeps their leases alive, runs them, records one result each."""

from __future__ import annotations

import os
import socket
import threading
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs

from metatrain.jobs.queue import FileQueue, Lease
from metatrain.specs import JobResult

RunFn = Callable[[Path, Path], JobResult]


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@attrs.define
class Worker:
    """Drains a ``FileQueue`` with ``run(bundle_dir, result_dir)``."""

    queue: FileQueue
    run: RunFn
    worker_id: str = attrs.field(factory=default_worker_id)
    lease_seconds: float = 120.0

    def _heartbeat(self, lease: Lease, stop: threading.Event) -> None:
        while not stop.wait(self.lease_seconds / 4):
            if self.queue.renew(lease, self.lease_seconds) is None:
                return

    def run_one(self) -> JobResult | None:
        """Run the next job, if any; returns its result (None when the queue is empty)."""
        self.queue.requeue_expired()
        lease = self.queue.claim(self.worker_id, self.lease_seconds)
        if lease is None:
            return None
        running = self.queue.path("running", lease.job_id)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(lease, stop), daemon=True)
        beat.start()
        try:
            result = self.run(running, running / "result")
        except Exception as exc:
            result = JobResult(
                job_id=lease.job_id,
                status="died",
                model="?",
                device="?",
                error=f"runner crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc(-3)}",
            )
        finally:
            stop.set()
            beat.join()
        result = result.model_copy(update={"attempts": lease.attempt})
        self.queue.complete(lease, result)
        return result

    def drain(self, until: str | None = None) -> None:
        """Run jobs until the queue is empty (or until job ``until`` is done)."""
        while True:
            if until is not None and self.queue.state(until) == "done":
                return
            if self.run_one() is None:
                if until is None or self.queue.state(until) != "running":
                    return
                threading.Event().wait(1.0)
