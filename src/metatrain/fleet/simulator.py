"""Discrete-event simulator of the job queue and a warm GPU pod pool.

Answers what a fleet costs and how long a batch takes: pod utilisation (busy / billed time),
cost per completed job, total cost, batch wall time, jobs that died, job latency.

Events (batch arrival, pod ready, job finished, pod died, idle reap, provision retry) run from a
heap in time order; one numpy generator per run makes every seed reproducible. Times are seconds
from the first batch's arrival. ``SimConfig`` and ``SimResult`` cross file boundaries (JSON);
the pods and jobs inside a run are attrs values.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from metatrain.specs import CostRecord, JobResult

# ---------------------------------------------------------------- configuration (pydantic)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fixed(_Model):
    """Always the same number of seconds."""

    kind: Literal["fixed"] = "fixed"
    seconds: float = Field(ge=0.0)


class LogNormal(_Model):
    """``median_s · exp(sigma · N(0, 1))``: positive, right-skewed, like run times."""

    kind: Literal["lognormal"] = "lognormal"
    median_s: float = Field(gt=0.0)
    sigma: float = Field(0.3, ge=0.0, le=3.0)


class Empirical(_Model):
    """Resampled with replacement from recorded durations."""

    kind: Literal["empirical"] = "empirical"
    samples_s: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _non_negative(self) -> Empirical:
        bad = [s for s in self.samples_s if not (s >= 0.0 and math.isfinite(s))]
        if bad:
            raise ValueError(f"recorded durations must be finite and >= 0 s, got {bad[:3]}")
        return self


Duration = Annotated[Fixed | LogNormal | Empirical, Field(discriminator="kind")]


class GpuType(_Model):
    """One kind of pod: its price, its speed, and how many the market will rent us."""

    name: str = Field(min_length=1)
    usd_per_hour: float = Field(ge=0.0, description="price of one pod (all its GPUs) per hour")
    speed: float = Field(
        1.0, gt=0.0, description="throughput relative to the reference: run time = work / speed"
    )
    stock: int | None = Field(None, ge=0, description="most pods of this type held at once; None: no limit")
    availability: float = Field(
        1.0, ge=0.0, le=1.0, description="chance that one provision attempt finds this type in stock"
    )

    @property
    def usd_per_work_hour(self) -> float:
        """What one hour of reference work costs on this type (orders the default ladder)."""
        return self.usd_per_hour / self.speed


# Two GPUs per pod (1 inference + 1 trainer), prices ≈ Runpod on-demand list prices per GPU × 2.
# Speeds and stock caps are assumptions; availabilities reproduce the original fleet's GPU mix at
# 16 pods (A5000 ≈1 %, A40 ≈64 %, RTX 4090 ≈32 %, A6000 ≈3 %): see docs/fleet.md.
DEFAULT_GPUS: tuple[GpuType, ...] = (
    GpuType(name="2x RTX A5000", usd_per_hour=0.54, speed=1.0, stock=20, availability=0.02),
    GpuType(name="2x A40", usd_per_hour=0.80, speed=1.15, stock=400, availability=0.65),
    GpuType(name="2x RTX 4090", usd_per_hour=1.18, speed=1.5, stock=400, availability=0.9),
    GpuType(name="2x RTX A6000", usd_per_hour=0.98, speed=1.15, stock=200, availability=0.9),
)


class Provisioning(_Model):
    """Seconds from a provision request until the pod serves: image pull (cold or cached) + boot."""

    cold_pull_s: float = Field(165.0, ge=0.0)
    cached_pull_s: float = Field(33.0, ge=0.0)
    cold_fraction: float = Field(0.5, ge=0.0, le=1.0, description="share of pods that pull the image cold")
    boot: Duration = Field(default_factory=lambda: LogNormal(median_s=20.0, sigma=0.3))
    retry_s: float = Field(30.0, gt=0.0, description="wait before walking the ladder again after a stock-out")


class Failures(_Model):
    """Pods that die mid-job: the job goes back to the queue, up to ``max_attempts`` runs in all."""

    pod_death_per_attempt: float = Field(0.02, ge=0.0, le=1.0)
    max_attempts: int = Field(3, ge=1, le=100)


class Workload(_Model):
    """Outer batches of jobs. Batch k+1 arrives ``gap_s`` after batch k finished (``gap_from="done"``,
    the outer loop waits for its rewards) or after batch k arrived (``"arrival"``)."""

    jobs_per_batch: int = Field(40, ge=1, le=1_000_000)
    batches: int = Field(1, ge=1, le=10_000)
    gap_s: float = Field(600.0, ge=0.0)
    gap_from: Literal["done", "arrival"] = "done"
    spread_s: float = Field(0.0, ge=0.0, description="a batch's jobs arrive uniformly over this window")


class SimConfig(_Model):
    """Everything one simulated run needs (JSON in ``--config``)."""

    max_pods: int = Field(16, ge=1, le=1_000_000)
    gpus: tuple[GpuType, ...] = Field(DEFAULT_GPUS, min_length=1)
    ladder: tuple[str, ...] | None = Field(
        None, description="GPU names in preference order; default: cheapest per unit of work first"
    )
    job_work: Duration = Field(
        default_factory=lambda: LogNormal(median_s=840.0, sigma=0.35),
        description="a job's run time (pre-eval + train + post-eval) on a speed-1.0 pod",
    )
    provisioning: Provisioning = Field(default_factory=Provisioning)
    failures: Failures = Field(default_factory=Failures)
    workload: Workload = Field(default_factory=Workload)
    reap_s: float | None = Field(
        300.0,
        ge=0.0,
        description="terminate a pod idle this long; 0: as soon as the queue is empty; None: never",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SimConfig:
        names = [g.name for g in self.gpus]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"GPU type names must be unique, repeated: {dupes}")
        if self.ladder is not None:
            unknown = [n for n in self.ladder if n not in names]
            if unknown:
                raise ValueError(f"ladder names unknown GPU types {unknown}; known: {names}")
            if len(set(self.ladder)) != len(self.ladder):
                raise ValueError(f"ladder repeats a GPU type: {list(self.ladder)}")
        if not any(g.availability > 0 and g.stock != 0 for g in self.ladder_gpus()):
            raise ValueError("no GPU type on the ladder can ever be provisioned (stock 0 or availability 0)")
        return self

    def ladder_gpus(self) -> list[GpuType]:
        """The GPU types in the order provisioning tries them."""
        if self.ladder is not None:
            by_name = {g.name: g for g in self.gpus}
            return [by_name[n] for n in self.ladder]
        return sorted(self.gpus, key=lambda g: g.usd_per_work_hour)


class SimResult(_Model):
    """What one run measured. ``usd_per_job`` divides all spend by the jobs that completed."""

    seed: int
    jobs: int
    completed: int
    died: int
    attempts: int
    pods_provisioned: int
    stockouts: int = Field(description="ladder walks that found nothing in stock")
    busy_s: float
    provisioning_s: float
    idle_s: float
    billed_s: float
    utilisation: float
    total_usd: float
    usd_per_job: float | None
    makespan_s: float
    batch_wall_s: tuple[float, ...]
    latency_p50_s: float | None
    latency_p95_s: float | None
    gpu_mix: dict[str, int] = Field(description="pods provisioned per GPU type")

    @property
    def mean_batch_wall_s(self) -> float:
        return float(np.mean(self.batch_wall_s))


# ---------------------------------------------------------------- the event loop (attrs)


@attrs.define(eq=False)
class _Job:
    id: int
    batch: int
    arrival: float
    work_s: float
    attempts: int = 0
    finished_at: float | None = None
    died: bool = False


@attrs.define(eq=False)
class _Pod:
    id: int
    gpu: GpuType
    rank: int
    requested_at: float
    state: Literal["provisioning", "idle", "busy", "gone"] = "provisioning"
    ready_at: float | None = None
    ended_at: float | None = None
    busy_since: float = 0.0
    busy_s: float = 0.0
    epoch: int = 0
    job: _Job | None = None


def draw(duration: Fixed | LogNormal | Empirical, rng: np.random.Generator) -> float:
    """One sample of a duration, in seconds."""
    if isinstance(duration, Fixed):
        return duration.seconds
    if isinstance(duration, LogNormal):
        return duration.median_s * math.exp(duration.sigma * rng.standard_normal())
    return float(duration.samples_s[int(rng.integers(len(duration.samples_s)))])


@attrs.define
class _Sim:
    config: SimConfig
    rng: np.random.Generator
    now: float = 0.0
    events: list[tuple[float, int, str, Any]] = attrs.Factory(list)
    seq: int = 0
    queue: list[tuple[float, int, _Job]] = attrs.Factory(list)
    idle: list[tuple[int, float, int, int, _Pod]] = attrs.Factory(list)
    pods: list[_Pod] = attrs.Factory(list)
    jobs: list[_Job] = attrs.Factory(list)
    held: dict[str, int] = attrs.Factory(dict)
    alive: int = 0
    provisioning: int = 0
    stockouts: int = 0
    retry_pending: bool = False
    batch_arrival: list[float] = attrs.Factory(list)
    batch_open: list[int] = attrs.Factory(list)
    batch_end: list[float] = attrs.Factory(list)
    done: bool = False
    ladder: list[GpuType] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.ladder = self.config.ladder_gpus()

    def at(self, t: float, kind: str, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self) -> None:
        w = self.config.workload
        for k in range(w.batches if w.gap_from == "arrival" else 1):
            self.at(k * w.gap_s, "batch", k)
        handlers: dict[str, Callable[[Any], None]] = {
            "batch": self.on_batch,
            "job": self.on_job_arrival,
            "ready": self.on_ready,
            "finish": self.on_finish,
            "die": self.on_die,
            "reap": self.on_reap,
            "retry": self.on_retry,
        }
        while self.events and not self.done:
            t, _, kind, payload = heapq.heappop(self.events)
            self.now = t
            handlers[kind](payload)

    # -- arrivals
    def on_batch(self, k: int) -> None:
        w = self.config.workload
        self.batch_arrival.append(self.now)
        self.batch_open.append(w.jobs_per_batch)
        self.batch_end.append(math.nan)
        for _ in range(w.jobs_per_batch):
            job = _Job(len(self.jobs), k, self.now, draw(self.config.job_work, self.rng))
            self.jobs.append(job)
            if w.spread_s > 0:
                job.arrival = self.now + float(self.rng.uniform(0.0, w.spread_s))
                self.at(job.arrival, "job", job)
            else:
                self.enqueue(job)
        self.step()

    def on_job_arrival(self, job: _Job) -> None:
        self.enqueue(job)
        self.step()

    def enqueue(self, job: _Job) -> None:
        heapq.heappush(self.queue, (job.arrival, job.id, job))

    # -- pods
    def on_ready(self, pod: _Pod) -> None:
        if pod.state != "provisioning":
            return
        pod.ready_at = self.now
        self.provisioning -= 1
        self.make_idle(pod)
        self.step()

    def on_finish(self, payload: tuple[_Pod, int]) -> None:
        pod, epoch = payload
        if pod.state != "busy" or pod.epoch != epoch:
            return
        job = self.release(pod)
        job.finished_at = self.now
        self.make_idle(pod)
        self.job_done(job)
        self.step()

    def on_die(self, payload: tuple[_Pod, int]) -> None:
        pod, epoch = payload
        if pod.state != "busy" or pod.epoch != epoch:
            return
        job = self.release(pod)
        self.terminate(pod)
        if job.attempts < self.config.failures.max_attempts:
            self.enqueue(job)
        else:
            job.died = True
            job.finished_at = self.now
            self.job_done(job)
        self.step()

    def on_reap(self, payload: tuple[_Pod, int]) -> None:
        pod, epoch = payload
        if pod.state == "idle" and pod.epoch == epoch:
            self.terminate(pod)

    def on_retry(self, _: None) -> None:
        self.retry_pending = False
        self.step()

    def release(self, pod: _Pod) -> _Job:
        assert pod.job is not None
        job, pod.job = pod.job, None
        pod.busy_s += self.now - pod.busy_since
        return job

    def make_idle(self, pod: _Pod) -> None:
        pod.state = "idle"
        pod.epoch += 1
        heapq.heappush(self.idle, (pod.rank, self.now, pod.id, pod.epoch, pod))
        reap = self.config.reap_s
        if reap is not None and reap > 0:
            self.at(self.now + reap, "reap", (pod, pod.epoch))

    def terminate(self, pod: _Pod) -> None:
        if pod.state == "gone":
            return
        if pod.state == "provisioning":
            self.provisioning -= 1
        pod.state = "gone"
        pod.ended_at = self.now
        pod.epoch += 1
        self.alive -= 1
        self.held[pod.gpu.name] -= 1

    # -- the scheduler: dispatch, reap at 0 s, scale up
    def step(self) -> None:
        self.dispatch()
        if self.config.reap_s == 0 and not self.queue:
            for *_, epoch, pod in self.idle:
                if pod.state == "idle" and pod.epoch == epoch:
                    self.terminate(pod)
            self.idle.clear()
        self.scale_up()

    def dispatch(self) -> None:
        while self.queue and self.idle:
            _, _, _, epoch, pod = heapq.heappop(self.idle)
            if pod.state != "idle" or pod.epoch != epoch:
                continue
            _, _, job = heapq.heappop(self.queue)
            self.start(pod, job)

    def start(self, pod: _Pod, job: _Job) -> None:
        pod.state = "busy"
        pod.epoch += 1
        pod.job = job
        pod.busy_since = self.now
        job.attempts += 1
        run_s = job.work_s / pod.gpu.speed
        if self.rng.random() < self.config.failures.pod_death_per_attempt:
            self.at(self.now + float(self.rng.uniform(0.0, run_s)), "die", (pod, pod.epoch))
        else:
            self.at(self.now + run_s, "finish", (pod, pod.epoch))

    def scale_up(self) -> None:
        while len(self.queue) > self.provisioning and self.alive < self.config.max_pods:
            gpu, rank = self.walk_ladder()
            if gpu is None:
                self.stockouts += 1
                if not self.retry_pending:
                    self.retry_pending = True
                    self.at(self.now + self.config.provisioning.retry_s, "retry")
                return
            self.provision(gpu, rank)

    def walk_ladder(self) -> tuple[GpuType | None, int]:
        for rank, gpu in enumerate(self.ladder):
            if gpu.stock is not None and self.held.get(gpu.name, 0) >= gpu.stock:
                continue
            if gpu.availability < 1.0 and self.rng.random() >= gpu.availability:
                continue
            return gpu, rank
        return None, -1

    def provision(self, gpu: GpuType, rank: int) -> None:
        p = self.config.provisioning
        pod = _Pod(len(self.pods), gpu, rank, self.now)
        self.pods.append(pod)
        self.alive += 1
        self.provisioning += 1
        self.held[gpu.name] = self.held.get(gpu.name, 0) + 1
        pull = p.cold_pull_s if self.rng.random() < p.cold_fraction else p.cached_pull_s
        self.at(self.now + pull + draw(p.boot, self.rng), "ready", pod)

    # -- batches
    def job_done(self, job: _Job) -> None:
        k = job.batch
        self.batch_open[k] -= 1
        if self.batch_open[k]:
            return
        self.batch_end[k] = self.now
        w = self.config.workload
        if w.gap_from == "done" and k + 1 < w.batches:
            self.at(self.now + w.gap_s, "batch", k + 1)
        if len(self.batch_end) == w.batches and all(not math.isnan(e) for e in self.batch_end):
            for pod in self.pods:  # shutdown: the worker ends, every pod is terminated
                self.terminate(pod)
            self.done = True


def simulate(config: SimConfig, seed: int = 0) -> SimResult:
    """Run one simulation to the end of the last batch (then every pod is terminated)."""
    sim = _Sim(config, np.random.default_rng(seed))
    sim.run()
    return _measure(sim, seed)


def _measure(sim: _Sim, seed: int) -> SimResult:
    busy = provisioning = billed = usd = 0.0
    mix: dict[str, int] = {}
    for pod in sim.pods:
        assert pod.ended_at is not None
        held = pod.ended_at - pod.requested_at
        billed += held
        provisioning += (pod.ready_at if pod.ready_at is not None else pod.ended_at) - pod.requested_at
        busy += pod.busy_s
        usd += held * pod.gpu.usd_per_hour / 3600.0
        mix[pod.gpu.name] = mix.get(pod.gpu.name, 0) + 1
    completed = [j for j in sim.jobs if not j.died and j.finished_at is not None]
    latencies = [j.finished_at - j.arrival for j in completed if j.finished_at is not None]
    p50, p95 = (float(v) for v in np.percentile(latencies, [50, 95])) if latencies else (None, None)
    return SimResult(
        seed=seed,
        jobs=len(sim.jobs),
        completed=len(completed),
        died=sum(j.died for j in sim.jobs),
        attempts=sum(j.attempts for j in sim.jobs),
        pods_provisioned=len(sim.pods),
        stockouts=sim.stockouts,
        busy_s=busy,
        provisioning_s=provisioning,
        idle_s=max(0.0, billed - busy - provisioning),
        billed_s=billed,
        utilisation=busy / billed if billed > 0 else 0.0,
        total_usd=usd,
        usd_per_job=usd / len(completed) if completed else None,
        makespan_s=max(sim.batch_end) if sim.batch_end else 0.0,
        batch_wall_s=tuple(e - a for a, e in zip(sim.batch_arrival, sim.batch_end, strict=True)),
        latency_p50_s=p50,
        latency_p95_s=p95,
        gpu_mix=dict(sorted(mix.items())),
    )


# ---------------------------------------------------------------- sweeps and statistics


class Interval(_Model):
    """Mean over seeds with a 95 % confidence interval (Student t)."""

    mean: float
    lo: float
    hi: float
    n: int


_T975_TABLE = (  # two-sided 95 % Student t critical values for 1..30 degrees of freedom
    "12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 "
    "2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042"
)
_T975 = tuple(float(v) for v in _T975_TABLE.split())


def t975(df: int) -> float:
    """Two-sided 95 % Student t critical value (table to 30 degrees of freedom, then an expansion)."""
    if df < 1:
        raise ValueError("need at least 2 samples for an interval")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: Sequence[float]) -> Interval:
    """Mean and 95 % interval of the mean; a single value has a zero-width interval."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        raise ValueError("no values")
    m = float(a.mean())
    if a.size == 1:
        return Interval(mean=m, lo=m, hi=m, n=1)
    half = t975(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return Interval(mean=m, lo=m - half, hi=m + half, n=int(a.size))


METRICS: dict[str, Callable[[SimResult], float | None]] = {
    "utilisation": lambda r: r.utilisation,
    "usd_per_job": lambda r: r.usd_per_job,
    "total_usd": lambda r: r.total_usd,
    "batch_wall_s": lambda r: r.mean_batch_wall_s,
    "makespan_s": lambda r: r.makespan_s,
    "latency_p50_s": lambda r: r.latency_p50_s,
    "latency_p95_s": lambda r: r.latency_p95_s,
    "died": lambda r: float(r.died),
    "pods_provisioned": lambda r: float(r.pods_provisioned),
    "idle_s": lambda r: r.idle_s,
    "provisioning_s": lambda r: r.provisioning_s,
}


class ScenarioSummary(_Model):
    """One scenario over several seeds: every metric as mean ± 95 % interval."""

    label: str
    pods: int
    jobs_per_batch: int
    batches: int
    reap_s: float | None
    seeds: int
    metrics: dict[str, Interval]
    gpu_mix: dict[str, float] = Field(description="share of provisioned pods per GPU type")


def summarise(label: str, config: SimConfig, results: Sequence[SimResult]) -> ScenarioSummary:
    metrics: dict[str, Interval] = {}
    for name, get in METRICS.items():
        values = [v for v in (get(r) for r in results) if v is not None]
        if values:
            metrics[name] = mean_ci(values)
    totals: dict[str, int] = {}
    for r in results:
        for gpu, n in r.gpu_mix.items():
            totals[gpu] = totals.get(gpu, 0) + n
    pods = sum(totals.values()) or 1
    return ScenarioSummary(
        label=label,
        pods=config.max_pods,
        jobs_per_batch=config.workload.jobs_per_batch,
        batches=config.workload.batches,
        reap_s=config.reap_s,
        seeds=len(results),
        metrics=metrics,
        gpu_mix={gpu: n / pods for gpu, n in sorted(totals.items())},
    )


@attrs.frozen
class Scenario:
    """A labelled configuration to run over several seeds."""

    label: str
    config: SimConfig


def with_(config: SimConfig, **changes: Any) -> SimConfig:
    """A copy with top-level or ``workload__field`` changes, validated again."""
    data = config.model_dump()
    for key, value in changes.items():
        if "__" in key:
            outer, inner = key.split("__", 1)
            data[outer][inner] = value
        else:
            data[key] = value
    return SimConfig.model_validate(data)


def scaling_scenarios(base: SimConfig, pods: Sequence[int], big_batch: int) -> list[Scenario]:
    """One batch per scenario: jobs in proportion to pods (the base's ratio), and a fixed big batch."""
    ratio = base.workload.jobs_per_batch / base.max_pods
    out: list[Scenario] = []
    for p in pods:
        jobs = max(1, round(ratio * p))
        out.append(
            Scenario(
                "proportional", with_(base, max_pods=p, workload__jobs_per_batch=jobs, workload__batches=1)
            )
        )
    for p in pods:
        out.append(
            Scenario(
                "fixed", with_(base, max_pods=p, workload__jobs_per_batch=big_batch, workload__batches=1)
            )
        )
    return out


def reap_scenarios(base: SimConfig, pods: Sequence[int], reaps: Sequence[float | None]) -> list[Scenario]:
    """Several outer batches per scenario (the base's batches and gap), for each pool size and reap."""
    ratio = base.workload.jobs_per_batch / base.max_pods
    return [
        Scenario("reap", with_(base, max_pods=p, reap_s=r, workload__jobs_per_batch=max(1, round(ratio * p))))
        for p in pods
        for r in reaps
    ]


def run_scenarios(
    scenarios: Sequence[Scenario],
    seeds: Iterable[int],
    on_run: Callable[[Scenario, int], None] | None = None,
) -> list[ScenarioSummary]:
    """Every scenario over every seed; ``on_run`` is called after each run (for a progress bar)."""
    seed_list = list(seeds)
    out = []
    for scn in scenarios:
        results = []
        for seed in seed_list:
            results.append(simulate(scn.config, seed))
            if on_run is not None:
                on_run(scn, seed)
        out.append(summarise(scn.label, scn.config, results))
    return out


# ---------------------------------------------------------------- recorded runs


@attrs.frozen
class RecordedRuns:
    """Job durations and attempt outcomes read from a runs directory."""

    durations_s: tuple[float, ...]
    attempts: int
    failed_attempts: int
    source: str

    @property
    def failure_rate(self) -> float | None:
        return self.failed_attempts / self.attempts if self.attempts else None

    def apply(self, config: SimConfig) -> SimConfig:
        """``config`` with job work resampled from these durations (and their failure rate, if known)."""
        changes: dict[str, Any] = {"job_work": {"kind": "empirical", "samples_s": self.durations_s}}
        rate = self.failure_rate
        if rate is not None:
            changes["failures"] = {**config.failures.model_dump(), "pod_death_per_attempt": rate}
        return with_(config, **changes)


_LEDGER_SECONDS = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?) s at ")


def read_recorded_runs(runs_dir: Path) -> RecordedRuns:
    """Durations from every ``result.json`` that is a JobResult under ``runs_dir``; failing those,
    from compute records of the ``costs.jsonl`` ledgers there (deduplicated)."""
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"runs directory not found: {runs_dir}")
    durations: list[float] = []
    attempts = failed = 0
    for path in sorted(runs_dir.rglob("result.json")):
        try:
            result = JobResult.model_validate_json(path.read_bytes())
        except ValidationError:
            continue  # an episode's result.json, not a job's
        seconds = (
            result.timing.total or result.timing.pre_eval + result.train_seconds + result.timing.post_eval
        )
        if seconds > 0 and result.status != "died":
            durations.append(seconds)
        attempts += result.attempts
        failed += result.attempts if result.status == "died" else result.attempts - 1
    if durations:
        return RecordedRuns(tuple(durations), attempts, failed, f"{len(durations)} job results in {runs_dir}")
    seen: set[tuple[str, str, str, str]] = set()
    for path in sorted(runs_dir.rglob("costs.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = CostRecord.model_validate_json(line)
            match = _LEDGER_SECONDS.match(record.note)
            key = (record.run_id, record.ts.isoformat(), record.model, record.note)
            if record.kind == "compute" and match and key not in seen:
                seen.add(key)
                durations.append(float(match.group(1)))
    if not durations:
        raise ValueError(
            f"no job durations under {runs_dir}: no JobResult result.json and no compute records"
        )
    return RecordedRuns(
        tuple(durations), 0, 0, f"{len(durations)} compute records in ledgers under {runs_dir}"
    )


class SweepReport(_Model):
    """What ``metatrain fleet simulate --json`` writes: the base config and every scenario's summary."""

    base: SimConfig
    seeds: int
    durations: str = Field(description="where job durations came from")
    scaling: tuple[ScenarioSummary, ...]
    reap: tuple[ScenarioSummary, ...]
