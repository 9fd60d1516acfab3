"""The fleet worker: drains a ``FileQueue`` onto the warm pool, one job per pod.

Each ``tick()``: requeue jobs of dead workers; poll busy pods (results are downloaded into the
queue exactly as the local provider writes them); bring provisioning pods up; dispatch queued jobs
to idle pods (a job a pod was already running before a worker restart goes back to that pod, whose
runner recognises the job id and never runs it twice); grow the pool to demand, up to
``max_pods``; reap pods idle past ``idle_reap_s``. A pod that dies mid-job is terminated and its
job requeued, until the queue's ``max_attempts``, after which it is recorded ``died``.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from metatrain.fleet.client import RunnerError, RunnerRejected, RunnerUnavailable
from metatrain.jobs.queue import FileQueue, Lease
from metatrain.jobs.worker import default_worker_id
from metatrain.protocols import ProgressFn
from metatrain.specs import BundleManifest, JobResult
from metatrain_runpod.pool import Pod, Pool, now, pod_is_gone

log = logging.getLogger("metatrain_runpod")


def _noop(event: str, data: dict[str, Any]) -> None:
    pass


@attrs.define
class Flight:
    """A job this worker holds a lease on, and where it runs."""

    lease: Lease
    run_id: str
    model: str
    pod_id: str | None = None
    since: int = 0
    renewed_at: float = attrs.field(factory=time.monotonic)


@attrs.define
class Fleet:
    pool: Pool
    queue: FileQueue
    eval_secret: str | None = attrs.field(default=None, repr=False)
    progress: ProgressFn = _noop
    worker_id: str = attrs.field(factory=lambda: f"runpod-{default_worker_id()}")
    flights: dict[str, Flight] = attrs.field(factory=dict)
    next_provision_at: float = 0.0
    stock_retry_s: float = 30.0
    health_interval_s: float = 30.0

    @property
    def config(self) -> Any:
        return self.pool.config

    # ---------------------------------------------------------------- main loop
    def run(
        self,
        once: bool = False,
        until: str | None = None,
        stop: threading.Event | None = None,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        """Tick until stopped; ``once``: until the queue is drained; ``until``: until that job is done.

        Every pod is terminated on the way out, whatever the reason (also KeyboardInterrupt).
        """
        stop = stop or threading.Event()
        sleep = sleep or stop.wait
        try:
            self.pool.start()
            while not stop.is_set():
                self.tick()
                if until is not None and self.queue.state(until) == "done":
                    break
                if once and self.drained():
                    break
                sleep(self.config.poll_interval_s)
        finally:
            self._release_flights()
            failed = self.pool.shutdown()
            if failed:
                log.error(
                    "pods %s could not be terminated; they stay in the state file and are reaped on "
                    "the next start",
                    failed,
                )

    def drained(self) -> bool:
        return not self.flights and not self.queue.ids("queued")

    def tick(self) -> None:
        self.queue.requeue_expired()
        for flight in list(self.flights.values()):
            self._poll(flight)
        for pod in list(self.pool.pods.values()):
            if pod.record.status == "provisioning":
                self.pool.check_provisioning(pod)
        self._dispatch()
        self._grow()
        self._reap_idle()
        self._renew_leases()

    # ---------------------------------------------------------------- dispatch
    def _free_pods(self) -> list[Pod]:
        return [p for p in self.pool.pods.values() if p.record.status == "idle"]

    def _adopted_busy(self) -> dict[str, Pod]:
        """Pods busy with a job this worker holds no lease on (left by a previous worker)."""
        return {
            p.record.job_id: p
            for p in self.pool.pods.values()
            if p.record.status == "busy" and p.record.job_id and p.record.job_id not in self.flights
        }

    def _pod_holding(self, job_id: str) -> Pod | None:
        """The live pod whose record says it runs ``job_id`` (adopted after a restart), if any."""
        return next(
            (p for p in self.pool.pods.values() if p.record.status == "busy" and p.record.job_id == job_id),
            None,
        )

    def _dispatch(self) -> None:
        self._settle_adopted()
        for flight in [f for f in self.flights.values() if f.pod_id is None]:  # parked jobs first
            self._place(flight)
        while True:
            adopted = self._adopted_busy()
            if not adopted and not self._free_pods():
                return
            lease = self.queue.claim(self.worker_id, self.config.lease_seconds)
            if lease is None:
                return
            manifest = BundleManifest.model_validate_json(
                (self.queue.path("running", lease.job_id) / "bundle.json").read_text()
            )
            flight = Flight(lease, manifest.run_id, manifest.job.train.model)
            self.flights[lease.job_id] = flight
            self._place(flight)
            if flight.pod_id is None and not adopted:
                return  # parked; with adopted pods, claiming goes on until their jobs turn up

    def _settle_adopted(self) -> None:
        """An adopted pod whose job is no longer waiting in the queue (already done) is idle again."""
        for job_id, pod in self._adopted_busy().items():
            if self.queue.state(job_id) not in ("queued", "running"):
                rec = pod.record
                rec.status, rec.job_id, rec.job_started_at, rec.last_busy_at = "idle", None, None, now()
                self.pool.save()

    def _place(self, flight: Flight) -> None:
        job_id = flight.lease.job_id
        pod = self._pod_holding(job_id)
        if pod is None:
            free = self._free_pods()
            if not free:
                return
            pod = free[0]
        client = self.pool.ensure_client(pod)
        assert client is not None
        rec = pod.record
        before = (rec.status, rec.job_id, rec.job_started_at)
        if rec.job_id != job_id:
            rec.job_started_at = now()
        rec.status, rec.job_id, rec.last_busy_at = "busy", job_id, now()
        self.pool.save()  # write-ahead: after a crash, the job goes back to this pod (idempotent there)
        try:
            status = client.submit(self.queue.path("running", job_id), job_id, self.eval_secret)
        except RunnerRejected as exc:
            rec.status, rec.job_id, rec.job_started_at = before
            self.pool.save()
            self._refused(flight, pod, exc)
            return
        except RunnerError as exc:
            # No answer: the runner may have started the job before it went quiet, so the pod keeps
            # holding it. The next tick resubmits there (idempotent); if the pod is dead, the job is
            # lost on this attempt like any job on a dying pod.
            log.warning("pod %s did not answer the submission of job %s: %s", rec.id, job_id, exc)
            self._silent(pod, str(exc))
            return
        flight.pod_id, flight.since = rec.id, 0
        pod.silent_since = None
        log.info("job %s (attempt %d) → pod %s [%s]", job_id, flight.lease.attempt, rec.id, status.state)
        self.progress("log", {"message": f"job {job_id} running on pod {rec.id} ({rec.gpu_type_id})"})

    def _refused(self, flight: Flight, pod: Pod, exc: RunnerRejected) -> None:
        """The runner said no: a bundle it rejects dies; a pod that cannot take a job is replaced."""
        job_id = flight.lease.job_id
        if exc.status_code in (400, 413):
            self._finish(flight, self._died(flight, f"the runner refused the bundle: {exc.detail}"))
        else:
            self._pod_failed(pod, f"runner refused job {job_id}: {exc}")

    # ---------------------------------------------------------------- polling
    def _poll(self, flight: Flight) -> None:
        if flight.pod_id is None:
            return
        pod = self.pool.pods.get(flight.pod_id)
        if pod is None:
            self._job_lost(flight, f"pod {flight.pod_id} is gone")
            return
        client = self.pool.ensure_client(pod)
        assert client is not None
        job_id = flight.lease.job_id
        try:
            status = client.status(job_id, flight.since)
        except RunnerUnavailable as exc:
            self._silent(pod, str(exc))
            return
        except RunnerRejected as exc:
            self._pod_failed(pod, f"runner lost job {job_id}: {exc}")
            return
        pod.silent_since = None
        for event in status.events:
            self.progress(event.event, event.data)
        flight.since = status.events_total
        if status.done:
            self._collect(flight, pod)
        elif pod.record.job_started_at and (now() - pod.record.job_started_at).total_seconds() > (
            self.config.job_timeout_s
        ):
            self._pod_failed(pod, f"job {job_id} ran past job_timeout_s={self.config.job_timeout_s:g}")

    def _collect(self, flight: Flight, pod: Pod) -> None:
        job_id = flight.lease.job_id
        client = pod.client
        assert client is not None
        with tempfile.TemporaryDirectory(dir=self.queue.root / "incoming", prefix=".dl-") as tmp:
            try:
                result_dir = client.download_artifacts(
                    job_id, Path(tmp) / "result", include_weights=self.config.download_weights
                )
                result = client.result(job_id)
            except RunnerUnavailable as exc:
                self._silent(pod, str(exc))
                return
            except RunnerError as exc:
                self._pod_failed(pod, f"could not fetch the result of job {job_id}: {exc}")
                return
            self.pool.bill_job(pod, flight.run_id, job_id)
            rec = pod.record
            rec.status, rec.job_id, rec.job_started_at = "idle", None, None
            rec.last_busy_at, rec.jobs_done = now(), rec.jobs_done + 1
            self.pool.save()
            self._finish(flight, result, result_dir)
        log.info("job %s %s on pod %s", job_id, result.status, pod.record.id)

    def _finish(self, flight: Flight, result: JobResult, result_dir: Path | None = None) -> None:
        result = result.model_copy(update={"attempts": flight.lease.attempt})
        self.queue.complete(flight.lease, result, result_dir)
        self.flights.pop(flight.lease.job_id, None)

    def _died(self, flight: Flight, error: str) -> JobResult:
        return JobResult(
            job_id=flight.lease.job_id, status="died", model=flight.model, device="runpod", error=error
        )

    # ---------------------------------------------------------------- failures
    def _silent(self, pod: Pod, why: str) -> None:
        """A pod stopped answering: dead at once if Runpod says so, else after the grace period."""
        t = time.monotonic()
        pod.silent_since = pod.silent_since or t
        info = self.pool.api.get_pod(pod.record.id)
        if pod_is_gone(info):
            self._pod_failed(pod, f"pod died ({why})")
        elif t - pod.silent_since > self.config.unreachable_grace_s:
            self._pod_failed(pod, f"runner unreachable for {t - pod.silent_since:.0f} s ({why})")

    def _pod_failed(self, pod: Pod, reason: str) -> None:
        """Terminate a broken pod; its job (if any) is requeued or, past the cap, recorded died."""
        job_id = pod.record.job_id
        if job_id is not None and job_id in self.flights:
            self.pool.bill_job(pod, self.flights[job_id].run_id, job_id)
        self.pool.terminate(pod, reason)
        if job_id is not None and job_id in self.flights:
            self._job_lost(self.flights[job_id], f"pod {pod.record.id} ({pod.record.gpu_type_id}): {reason}")

    def _job_lost(self, flight: Flight, reason: str) -> None:
        lease = flight.lease
        if lease.attempt >= self.queue.max_attempts:
            log.error(
                "job %s died on attempt %d/%d: %s",
                lease.job_id,
                lease.attempt,
                self.queue.max_attempts,
                reason,
            )
            self._finish(
                flight,
                self._died(flight, f"died on attempt {lease.attempt}/{self.queue.max_attempts}: {reason}"),
            )
            return
        log.warning("job %s lost on attempt %d (%s); requeued", lease.job_id, lease.attempt, reason)
        self.flights.pop(lease.job_id, None)
        self.queue.renew(lease, 0.0)
        self.queue.requeue_expired()

    def _release_flights(self) -> None:
        """On shutdown, jobs still in flight go back to the queue (their pods are about to go)."""
        for flight in list(self.flights.values()):
            self.queue.renew(flight.lease, 0.0)
        self.flights.clear()
        self.queue.requeue_expired()

    # ---------------------------------------------------------------- pool size
    def _grow(self) -> None:
        live = list(self.pool.pods.values())
        waiting = len(self.queue.ids("queued")) + sum(1 for f in self.flights.values() if f.pod_id is None)
        spare = sum(1 for p in live if p.record.status in ("idle", "provisioning"))
        want = min(waiting - spare, self.config.max_pods - len(live))
        if want <= 0 or time.monotonic() < self.next_provision_at:
            return
        for _ in range(want):
            if self.pool.provision() is None:
                self.next_provision_at = time.monotonic() + self.stock_retry_s
                self.progress("log", {"message": "no GPU in stock on the ladder; retrying later"})
                return

    def _reap_idle(self) -> None:
        waiting = bool(self.queue.ids("queued"))
        t = time.monotonic()
        for pod in list(self.pool.pods.values()):
            rec = pod.record
            if rec.status != "idle":
                continue
            idle_for = (now() - (rec.last_busy_at or rec.created_at)).total_seconds()
            if not waiting and idle_for > self.config.idle_reap_s:
                self.pool.terminate(pod, f"idle for {idle_for:.0f} s")
            elif t - pod.checked_at > self.health_interval_s:
                pod.checked_at = t
                client = self.pool.ensure_client(pod)
                try:
                    if client is not None:
                        client.health()
                        pod.silent_since = None
                except RunnerError as exc:
                    self._silent(pod, str(exc))

    def _renew_leases(self) -> None:
        t = time.monotonic()
        for flight in list(self.flights.values()):
            if t - flight.renewed_at > self.config.lease_seconds / 4:
                renewed = self.queue.renew(flight.lease, self.config.lease_seconds)
                if renewed is None:
                    log.warning("lost the lease on job %s; dropping it", flight.lease.job_id)
                    self.flights.pop(flight.lease.job_id, None)
                    continue
                flight.lease, flight.renewed_at = renewed, t
