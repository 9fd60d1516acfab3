"""The warm pool: provisioning down the GPU ladder, health checks, reaping, termination and billing.

Invariants:
- a pod's id is in the state file before anything waits on it (right after ``create_pod`` returns);
- every pod carries the pool's tag (``metatrain-<pool_id>-``); on start, tagged pods the state does
  not list as live are terminated, and live ones are adopted only if they are replicas (same
  bootstrap fingerprint, token derivable from the current key);
- every pod's time is billed exactly once: job time to the job's run, the rest to the pool.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from metatrain.costs.ledger import append_cost
from metatrain.fleet.client import RunnerClient, RunnerRejected, RunnerUnavailable
from metatrain.fleet.versions import mismatches
from metatrain.specs import CostRecord, RunnerHealth
from metatrain_runpod.api import OutOfStock, RunpodApi
from metatrain_runpod.bootstrap import TOKEN_ENV, PodSpec, pod_spec
from metatrain_runpod.config import Pins, PoolConfig
from metatrain_runpod.state import PodRecord, PoolState, StateStore
from metatrain_runpod.tokens import runner_token, token_sha256

log = logging.getLogger("metatrain_runpod")
ClientFactory = Callable[[str, str, float], RunnerClient]


class ProvisioningError(RuntimeError):
    """Pods keep failing to come up: stop rather than pay for more."""


def now() -> datetime:
    return datetime.now().astimezone()


def runner_url(pod: dict[str, Any], port: int, proxy_url: str) -> str | None:
    """Where the pod's runner listens: its public ip:port when the runtime reports one for ``port``,
    else Runpod's HTTPS proxy; None while the pod has no runtime (still provisioning)."""
    runtime = pod.get("runtime")
    if not runtime:
        return None
    for p in runtime.get("ports") or []:
        if p.get("privatePort") == port and p.get("isIpPublic") and p.get("ip") and p.get("publicPort"):
            return f"http://{p['ip']}:{p['publicPort']}"
    return proxy_url.format(pod_id=pod["id"], port=port)


def pin_mismatches(pins: Pins, health: RunnerHealth) -> list[str]:
    """How a runner's reported versions differ from the pool's pins (empty: the pod is a replica).

    A runner too old to report ``versions`` is checked on its metatrain ``version`` alone, and is then
    missing every other pin.
    """
    reported = {"metatrain": health.version, **health.versions}
    return mismatches(pins.expected_versions(), reported)


def pod_is_gone(pod: dict[str, Any] | None) -> bool:
    """Runpod no longer runs this pod's container (terminated, exited, or no runtime)."""
    return pod is None or pod.get("desiredStatus") != "RUNNING" or not pod.get("runtime")


@attrs.define
class Pod:
    """A live pod: its durable record plus what only lives in memory."""

    record: PodRecord
    token: str = attrs.field(repr=False)
    client: RunnerClient | None = None
    silent_since: float | None = None
    checked_at: float = 0.0


@attrs.define
class Pool:
    config: PoolConfig
    api: RunpodApi
    store: StateStore
    ledger: Path
    client_factory: ClientFactory = RunnerClient
    state: PoolState = attrs.field(init=False)
    spec: PodSpec = attrs.field(init=False)
    pods: dict[str, Pod] = attrs.field(factory=dict, init=False)
    failed_in_a_row: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self.spec = pod_spec(self.config)

    @property
    def tag(self) -> str:
        return f"metatrain-{self.state.pool_id}-"

    def save(self) -> None:
        self.store.save(self.state)

    # ---------------------------------------------------------------- start / stop
    def start(self) -> None:
        """Take the pool lock, load state, reap orphans and adopt replicas left by a previous worker."""
        self.store.acquire()
        self.state = self.store.load_or_create()
        listed = {p["id"]: p for p in self.api.list_pods() if str(p.get("name", "")).startswith(self.tag)}
        live = {r.id: r for r in self.state.live()}
        for pod_id, info in listed.items():
            if pod_id not in live:
                log.warning(
                    "reaping orphan pod %s (%s): tagged for this pool but not in its state",
                    pod_id,
                    info.get("name"),
                )
                self.api.terminate_pod(pod_id)
        for rec in live.values():
            token = runner_token(self.api.api_key, rec.name)
            pod = Pod(rec, token)
            if rec.id not in listed:
                self._retire(pod, "gone while no worker watched it")
            elif rec.spec_sha256 != self.spec.sha256:
                self.terminate(pod, "bootstrap changed since it was created (not a replica)")
            elif rec.token_sha256 != token_sha256(token):
                self.terminate(pod, "created under another API key (token not derivable)")
            else:
                log.info("adopting pod %s (%s, %s)", rec.id, rec.gpu_type_id, rec.status)
                self.pods[rec.id] = pod
        self.save()

    def shutdown(self, reason: str = "worker shutdown") -> list[str]:
        """Terminate every pod; returns the ids that could not be terminated (kept in state)."""
        failed: list[str] = []
        if not hasattr(self, "state"):  # start() failed before the state was read
            self.store.release()
            return failed
        for pod in list(self.pods.values()):
            try:
                self.terminate(pod, reason)
            except Exception as exc:
                log.error("could not terminate pod %s: %s", pod.record.id, exc)
                failed.append(pod.record.id)
        self.store.release()
        return failed

    # ---------------------------------------------------------------- provisioning
    def provision(self) -> Pod | None:
        """Create one pod, walking the GPU ladder past out-of-stock types; None if none has stock."""
        name = f"{self.tag}{uuid.uuid4().hex[:8]}"
        token = runner_token(self.api.api_key, name)
        for rung in self.config.gpu_ladder:
            try:
                info = self.api.create_pod(
                    name,
                    image_name=self.config.image,
                    gpu_type_id=rung.id,
                    cloud_type=rung.cloud_type,
                    gpu_count=rung.count,
                    support_public_ip=True,
                    start_ssh=False,
                    volume_in_gb=self.config.volume_gb,
                    container_disk_in_gb=self.config.container_disk_gb,
                    docker_args=self.spec.docker_args,
                    ports=self.spec.ports,
                    env={**self.spec.env, TOKEN_ENV: token},
                )
            except OutOfStock as exc:
                log.info("%s x%d out of stock (%s); trying the next GPU type", rung.id, rung.count, exc)
                continue
            record = PodRecord(
                id=str(info["id"]),
                name=name,
                gpu_type_id=rung.id,
                gpu_count=rung.count,
                cost_per_hr=float(info.get("costPerHr") or 0.0),
                spec_sha256=self.spec.sha256,
                token_sha256=token_sha256(token),
                created_at=now(),
            )
            self.state.pods[record.id] = record
            self.save()  # recorded before anything waits on it
            pod = Pod(record, token)
            self.pods[record.id] = pod
            log.info("created pod %s on %s x%d", record.id, rung.id, rung.count)
            return pod
        log.warning("no GPU type in the ladder has stock: %s", [g.id for g in self.config.gpu_ladder])
        return None

    def check_provisioning(self, pod: Pod) -> None:
        """Move a provisioning pod to idle once its runner answers /health at the pinned version."""
        rec = pod.record
        info = self.api.get_pod(rec.id)
        if info is None:
            self._retire(pod, "vanished while provisioning")
            return
        if info.get("costPerHr") is not None and rec.cost_per_hr != float(info["costPerHr"]):
            rec.cost_per_hr = float(info["costPerHr"])
            self.save()
        url = runner_url(info, self.config.runner_port, self.config.proxy_url)
        if url is not None:
            client = self.client_factory(url, pod.token, self.config.runner_timeout_s)
            try:
                health = client.health()
            except (RunnerUnavailable, RunnerRejected):
                health = None  # image pulling, bootstrap still installing, runner starting
            if health is not None:
                wrong = pin_mismatches(self.config.pins, health)
                if wrong:
                    self._failed_to_start(pod, f"version mismatch: runner reports {'; '.join(wrong)}")
                    return
                self.failed_in_a_row = 0
                pod.client, rec.base_url, rec.ready_at = client, url, now()
                rec.last_busy_at = rec.ready_at
                if rec.status == "provisioning":
                    rec.status = "idle"
                self.save()
                log.info("pod %s ready at %s after %.0f s", rec.id, url, self.age(rec))
                return
        if self.age(rec) > self.config.provision_timeout_s:
            self._failed_to_start(pod, f"stuck provisioning for {self.age(rec):.0f} s")

    def _failed_to_start(self, pod: Pod, reason: str) -> None:
        """Terminate a pod that never became usable; too many in a row stop the worker (runaway billing)."""
        self.terminate(pod, reason)
        self.failed_in_a_row += 1
        if self.failed_in_a_row >= self.config.max_failed_starts:
            raise ProvisioningError(
                f"{self.failed_in_a_row} pods in a row never became usable (last: {reason}); "
                "check the image, the bootstrap pins and provision_timeout_s"
            )

    def ensure_client(self, pod: Pod) -> RunnerClient | None:
        """An adopted pod's client (re-derived from its recorded URL)."""
        if pod.client is None and pod.record.base_url:
            pod.client = self.client_factory(pod.record.base_url, pod.token, self.config.runner_timeout_s)
        return pod.client

    @staticmethod
    def age(rec: PodRecord) -> float:
        return (now() - rec.created_at).total_seconds()

    # ---------------------------------------------------------------- termination and billing
    def terminate(self, pod: Pod, reason: str) -> None:
        """Terminate the pod at Runpod, bill its remaining time, and mark it terminated."""
        self.api.terminate_pod(pod.record.id)
        self._retire(pod, reason)

    def _retire(self, pod: Pod, reason: str) -> None:
        rec = pod.record
        ended = now()
        total = max(0.0, (ended - rec.created_at).total_seconds())
        self._bill(rec, f"fleet-{self.state.pool_id}", total - rec.billed_seconds, f"pod {rec.id} ({reason})")
        rec.status, rec.terminated_at, rec.terminate_reason = "terminated", ended, reason
        rec.job_id = None
        self.pods.pop(rec.id, None)
        self.save()
        log.info("pod %s terminated: %s", rec.id, reason)

    def bill_job(self, pod: Pod, run_id: str, job_id: str) -> None:
        """Bill the pod's time on ``job_id`` (dispatch to result) to the job's run."""
        rec = pod.record
        if rec.job_started_at is None:
            return
        seconds = max(0.0, (now() - rec.job_started_at).total_seconds())
        self._bill(rec, run_id, seconds, f"job {job_id} on pod {rec.id}")

    def _bill(self, rec: PodRecord, run_id: str, seconds: float, what: str) -> None:
        if seconds <= 0:
            return
        usd = rec.cost_per_hr * seconds / 3600.0
        rec.billed_seconds += seconds
        append_cost(
            self.ledger,
            CostRecord(
                ts=now(),
                run_id=run_id,
                kind="compute",
                model=f"runpod:{rec.gpu_type_id} x{rec.gpu_count}",
                usd=usd,
                note=f"{what}: {seconds:.1f} s at ${rec.cost_per_hr:.4f}/h",
            ),
        )
