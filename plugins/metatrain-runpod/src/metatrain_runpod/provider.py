"""The ``runpod`` compute provider: the file queue drained onto a warm pool of Runpod pods."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import attrs

from metatrain.jobs.queue import FileQueue
from metatrain.protocols import ProgressFn
from metatrain.specs import JobResult
from metatrain_runpod.api import RunpodApi
from metatrain_runpod.config import PoolConfig, load_pool_config
from metatrain_runpod.fleet import Fleet
from metatrain_runpod.pool import Pool, now
from metatrain_runpod.state import PoolBusyError, StateStore

log = logging.getLogger("metatrain_runpod")
EVAL_SECRET_ENV = "METATRAIN_EVAL_SECRET"


@attrs.frozen
class PodView:
    """One pod as ``metatrain fleet status`` shows it."""

    id: str
    gpu: str
    status: str
    job_id: str | None
    cost_per_hr: float
    uptime_seconds: float
    jobs_done: int


@attrs.frozen
class RunpodProvider:
    """Jobs go through the queue at ``queue_root``; a fleet worker runs them on pods.

    ``price_per_hour`` stays 0: pod time is billed by the pool itself (``runpod:<gpu>`` ledger lines,
    job time to the job's run and the rest to ``fleet-<pool>``), so an episode does not count it twice.
    """

    name: str = "runpod"
    queue_root: Path = Path("runs/queue")
    device: str = "cuda"
    train_wall_seconds: float | None = None
    price_per_hour: float = 0.0
    max_pods: int | None = None
    config_path: Path | None = None
    state_dir: Path | None = None
    ledger: Path | None = None
    api_key_env: str = "RUNPOD_API_KEY"

    def configure(self, **options: Any) -> RunpodProvider:
        return attrs.evolve(self, **{k: v for k, v in options.items() if v is not None})

    @property
    def queue(self) -> FileQueue:
        return FileQueue(self.queue_root)

    @property
    def pool_dir(self) -> Path:
        return self.state_dir or self.queue_root.parent / "fleet" / "runpod"

    def pool_config(self) -> PoolConfig:
        return load_pool_config(self.config_path, max_pods=self.max_pods)

    def submit(self, bundle_dir: Path, job_id: str) -> str:
        return self.queue.enqueue(bundle_dir, job_id)

    def result_dir(self, job_id: str) -> Path:
        return self.queue.path("done", job_id) / "result"

    def fleet(self, progress: ProgressFn | None = None) -> Fleet:
        """A fleet worker over this provider's queue, pool state and ledger."""
        config = self.pool_config()
        api = RunpodApi(
            os.environ.get(self.api_key_env, ""),
            attempts=config.api_attempts,
            backoff_s=config.api_backoff_s,
            backoff_max_s=config.api_backoff_max_s,
            on_retry=lambda what, n, why: log.warning(
                "Runpod %s failed (try %d): %s; retrying", what, n, why
            ),
        )
        pool = Pool(
            config, api, StateStore(self.pool_dir), self.ledger or self.queue_root.parent / "costs.jsonl"
        )
        fleet = Fleet(pool, self.queue, eval_secret=os.environ.get(EVAL_SECRET_ENV) or None)
        if progress is not None:
            fleet.progress = progress
        return fleet

    def drain(
        self, once: bool = True, progress: ProgressFn | None = None, stop: threading.Event | None = None
    ) -> None:
        """Run the fleet worker (``once``: until the queue is empty); every pod is terminated after."""
        self.fleet(progress).run(once=once, stop=stop)

    def wait(self, job_id: str, progress: ProgressFn | None = None) -> JobResult:
        """Run a fleet worker until ``job_id`` is done, or wait for the worker already draining this pool."""
        try:
            self.fleet(progress).run(until=job_id)
        except PoolBusyError:
            log.info("a fleet worker already holds %s; waiting for job %s", self.pool_dir, job_id)
            done = threading.Event()
            while self.queue.state(job_id) != "done":
                done.wait(2.0)
        result = self.queue.result(job_id)
        if result is None:
            raise RuntimeError(f"job {job_id} finished without a result")
        return result

    def fleet_pods(self) -> list[PodView]:
        """Live pods from the pool state file (as the worker last wrote it)."""
        state = StateStore(self.pool_dir).load()
        if state is None:
            return []
        t = now()
        return [
            PodView(
                id=p.id,
                gpu=f"{p.gpu_type_id} x{p.gpu_count}",
                status=p.status,
                job_id=p.job_id,
                cost_per_hr=p.cost_per_hr,
                uptime_seconds=(t - p.created_at).total_seconds(),
                jobs_done=p.jobs_done,
            )
            for p in state.live()
        ]
