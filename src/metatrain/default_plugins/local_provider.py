"""The ``local`` compute provider: a file queue drained on this machine (CPU or CUDA)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import attrs

from metatrain.jobs.queue import FileQueue
from metatrain.jobs.runner import run_job
from metatrain.jobs.worker import Worker
from metatrain.protocols import ProgressFn
from metatrain.specs import JobResult


@attrs.frozen
class LocalProvider:
    """Runs jobs here through the queue at ``queue_root``; ``wait`` drives a worker in this process."""

    name: str = "local"
    device: str = "cpu"
    queue_root: Path = Path("runs/queue")
    train_wall_seconds: float | None = None
    price_per_hour: float = 0.0
    """USD per hour of job time, for cost records (0 by default: this machine's CPU)."""

    def configure(self, **options: Any) -> LocalProvider:
        return attrs.evolve(self, **{k: v for k, v in options.items() if v is not None})

    @property
    def queue(self) -> FileQueue:
        return FileQueue(self.queue_root)

    def submit(self, bundle_dir: Path, job_id: str) -> str:
        return self.queue.enqueue(bundle_dir, job_id)

    def wait(self, job_id: str, progress: ProgressFn | None = None) -> JobResult:
        run = functools.partial(self._run, progress=progress)
        Worker(self.queue, run).drain(until=job_id)
        result = self.queue.result(job_id)
        if result is None:
            raise RuntimeError(f"job {job_id} finished without a result")
        return result

    def result_dir(self, job_id: str) -> Path:
        return self.queue.path("done", job_id) / "result"

    def _run(self, bundle: Path, result_dir: Path, progress: ProgressFn | None) -> JobResult:
        return run_job(bundle, result_dir, self.device, progress, self.train_wall_seconds)
