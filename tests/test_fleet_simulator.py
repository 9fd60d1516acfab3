"""Fleet simulator: hand-computed timelines, GPU ladder, failures, reaping, seeds, config errors, CLI."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from metatrain.cli.app import app as main_app
from metatrain.cli.fleet_simulate import simulate as simulate_cmd
from metatrain.fleet.simulator import (
    SimConfig,
    SimResult,
    SweepReport,
    mean_ci,
    read_recorded_runs,
    simulate,
    t975,
)
from metatrain.specs import CostRecord, JobResult, PhaseTiming

USD_PER_S = 3.6 / 3600  # $3.60 per hour = $0.001 per second


def config(**over: Any) -> SimConfig:
    """1 pod type at $3.60/h, speed 1; jobs of exactly 100 s; provisioning exactly 60 s; no failures."""
    data: dict[str, Any] = {
        "max_pods": 1,
        "gpus": [{"name": "g", "usd_per_hour": 3.6}],
        "job_work": {"kind": "fixed", "seconds": 100},
        "provisioning": {"cached_pull_s": 60, "cold_fraction": 0.0, "boot": {"kind": "fixed", "seconds": 0}},
        "failures": {"pod_death_per_attempt": 0.0, "max_attempts": 3},
        "workload": {"jobs_per_batch": 3, "batches": 1},
        "reap_s": None,
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and "kind" not in value:
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return SimConfig.model_validate(data)


def test_one_pod_three_jobs_by_hand() -> None:
    # provision 0→60, jobs 60→160→260→360, shutdown at 360
    r = simulate(config(), seed=0)
    assert (r.jobs, r.completed, r.died, r.attempts, r.pods_provisioned) == (3, 3, 0, 3, 1)
    assert r.makespan_s == pytest.approx(360) and r.batch_wall_s == pytest.approx((360,))
    assert r.billed_s == pytest.approx(360) and r.busy_s == pytest.approx(300)
    assert r.provisioning_s == pytest.approx(60) and r.idle_s == pytest.approx(0)
    assert r.utilisation == pytest.approx(300 / 360)
    assert r.total_usd == pytest.approx(360 * USD_PER_S) and r.usd_per_job == pytest.approx(0.12)
    assert r.latency_p50_s == pytest.approx(260)  # latencies 160, 260, 360
    assert r.latency_p95_s == pytest.approx(260 + 0.9 * 100)  # numpy's linear interpolation


def test_two_pods_and_a_faster_gpu_by_hand() -> None:
    # speed 2: 50 s per job; 2 pods take jobs 1,2 at 60; pod 1 takes job 3 at 110 → done 160;
    # pod 2 is idle 110→160 (reap never), both held 0→160.
    r = simulate(config(max_pods=2, gpus=[{"name": "g", "usd_per_hour": 3.6, "speed": 2.0}]), seed=0)
    assert r.makespan_s == pytest.approx(160) and r.pods_provisioned == 2
    assert r.billed_s == pytest.approx(320) and r.busy_s == pytest.approx(150)
    assert r.idle_s == pytest.approx(320 - 150 - 120)
    assert r.total_usd == pytest.approx(320 * USD_PER_S)
    # with reap 0 the idle pod is terminated at 110: billed 160 + 110
    r0 = simulate(config(max_pods=2, reap_s=0, gpus=[{"name": "g", "usd_per_hour": 3.6, "speed": 2.0}]))
    assert r0.billed_s == pytest.approx(270) and r0.idle_s == pytest.approx(0)


def test_ladder_orders_by_cost_per_work_and_falls_back_when_stock_runs_out() -> None:
    gpus = [
        {"name": "cheap-per-hour-but-slow", "usd_per_hour": 1.0, "speed": 0.5},  # $2 per work-hour
        {"name": "best", "usd_per_hour": 1.0, "speed": 1.0, "stock": 1},  # $1 per work-hour
        {"name": "fast", "usd_per_hour": 3.0, "speed": 2.0, "stock": 2},  # $1.5 per work-hour
    ]
    c = config(max_pods=4, reap_s=0, gpus=gpus, workload={"jobs_per_batch": 4})
    assert [g.name for g in c.ladder_gpus()] == ["best", "fast", "cheap-per-hour-but-slow"]
    r = simulate(c)
    assert r.gpu_mix == {"best": 1, "fast": 2, "cheap-per-hour-but-slow": 1}
    # reap 0: every pod is held 60 s + its one job (100, 50, 50, 200 s), then terminated
    assert r.billed_s == pytest.approx(4 * 60 + 100 + 50 + 50 + 200)
    assert r.total_usd == pytest.approx((160 * 1.0 + 2 * 110 * 3.0 + 260 * 1.0) / 3600)
    # an explicit ladder wins; a type that is never in stock is skipped
    explicit = config(
        max_pods=2,
        gpus=[*gpus, {"name": "never", "usd_per_hour": 0.0, "availability": 0.0}],
        ladder=["never", "cheap-per-hour-but-slow", "best"],
        workload={"jobs_per_batch": 2},
    )
    assert simulate(explicit).gpu_mix == {"cheap-per-hour-but-slow": 2}


def test_stock_out_waits_and_retries() -> None:
    # only 1 pod can exist: the second pod's ladder walk fails, the jobs run one after the other
    c = config(max_pods=3, gpus=[{"name": "g", "usd_per_hour": 3.6, "stock": 1}], provisioning={"retry_s": 7})
    r = simulate(c)
    assert r.pods_provisioned == 1 and r.stockouts >= 1
    assert r.makespan_s == pytest.approx(360) and r.completed == 3


def test_pod_death_requeues_then_records_died_at_the_cap() -> None:
    always = config(
        failures={"pod_death_per_attempt": 1.0, "max_attempts": 3}, workload={"jobs_per_batch": 2}
    )
    r = simulate(always, seed=3)
    assert (r.completed, r.died, r.attempts) == (0, 2, 6)
    assert r.pods_provisioned == 6  # each death loses the pod; a replacement is provisioned
    assert r.usd_per_job is None and r.latency_p50_s is None
    # pods never overlap (1 pod max): billed = 6 provisions + the partial runs
    assert r.billed_s == pytest.approx(6 * 60 + r.busy_s) and 0 < r.busy_s < 600
    never = simulate(config(failures={"pod_death_per_attempt": 0.0}))
    assert (never.died, never.attempts) == (0, 3)


def test_failure_rate_matches_its_probability() -> None:
    # p = 0.3, cap 3: a job dies with probability 0.3³ = 0.027 → 54 of 2000 expected (sd ≈ 7)
    c = config(
        max_pods=50,
        failures={"pod_death_per_attempt": 0.3, "max_attempts": 3},
        workload={"jobs_per_batch": 2000},
    )
    r = simulate(c, seed=11)
    assert 30 <= r.died <= 80 and r.completed + r.died == 2000
    assert r.attempts == pytest.approx(2000 * (1 + 0.3 + 0.09), rel=0.05)


def test_idle_reap_terminates_and_stops_billing() -> None:
    two = {"jobs_per_batch": 1, "batches": 2, "gap_s": 1000, "gap_from": "done"}
    # batch 0: provision 0→60, job 60→160; batch 1 arrives at 1160
    reaped = simulate(config(reap_s=300, workload=two))
    # pod 1 idle 160→460 then reaped; pod 2 provisioned 1160→1220, job →1320, shutdown
    assert reaped.pods_provisioned == 2
    assert reaped.billed_s == pytest.approx(460 + 160) and reaped.idle_s == pytest.approx(300)
    assert reaped.batch_wall_s == pytest.approx((160, 160)) and reaped.makespan_s == pytest.approx(1320)
    kept = simulate(config(reap_s=None, workload=two))  # one warm pod held 0→1260
    assert kept.pods_provisioned == 1 and kept.billed_s == pytest.approx(1260)
    assert kept.batch_wall_s == pytest.approx((160, 100))
    eager = simulate(config(reap_s=0, workload=two))
    assert eager.billed_s == pytest.approx(320) and eager.idle_s == pytest.approx(0)
    assert eager.total_usd < reaped.total_usd < kept.total_usd


def test_batches_on_a_fixed_schedule() -> None:
    # "arrival": batch k at k·gap regardless of the previous one; the second waits for the pod
    r = simulate(config(workload={"jobs_per_batch": 1, "batches": 2, "gap_s": 50, "gap_from": "arrival"}))
    assert r.batch_wall_s == pytest.approx((160, 210)) and r.makespan_s == pytest.approx(260)


def test_same_seed_same_result_other_seed_differs() -> None:
    c = SimConfig(max_pods=8)  # defaults: lognormal durations, cold/cached pulls, stock draws, failures
    a, b = simulate(c, seed=5), simulate(c, seed=5)
    assert a == b and isinstance(a, SimResult)
    assert simulate(c, seed=6).total_usd != a.total_usd


def test_defaults_land_in_the_original_systems_range() -> None:
    r = [simulate(SimConfig(), seed=s) for s in range(5)]  # 40 jobs on 16 pods
    per_job = mean_ci([x.usd_per_job or 0.0 for x in r]).mean
    assert 0.13 <= per_job <= 0.30  # the original reported ~$0.13–0.30 per job


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"max_pods": 0}, "max_pods"),
        ({"gpus": [{"name": "a", "usd_per_hour": 1}, {"name": "a", "usd_per_hour": 2}]}, "unique"),
        ({"ladder": ["nope"]}, "unknown GPU types"),
        ({"gpus": [{"name": "a", "usd_per_hour": 1, "stock": 0}]}, "can ever be provisioned"),
        ({"gpus": [{"name": "a", "usd_per_hour": -1}]}, "usd_per_hour"),
        ({"job_work": {"kind": "empirical", "samples_s": [10, -5]}}, "finite and >= 0"),
        ({"job_work": {"kind": "gamma", "shape": 2}}, "kind"),
        ({"failures": {"max_attempts": 0}}, "max_attempts"),
        ({"pods": 3}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_config_is_a_clear_error(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(**over)


def test_mean_and_interval() -> None:
    i = mean_ci([1.0, 2.0, 3.0])
    assert i.mean == 2.0 and i.hi - i.mean == pytest.approx(4.303 / 3**0.5, rel=1e-3)
    assert t975(40) == pytest.approx(2.021, abs=2e-3) and t975(1000) == pytest.approx(1.962, abs=1e-3)
    assert mean_ci([4.0]).lo == mean_ci([4.0]).hi == 4.0


def _job_result(job_id: str, status: str, total: float, attempts: int) -> str:
    return JobResult(
        job_id=job_id,
        status=status,
        model="m",
        device="cuda",
        timing=PhaseTiming(total=total),
        attempts=attempts,
    ).model_dump_json()  # type: ignore[arg-type]


def runs_dir(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    for name, status, total, attempts in [
        ("a", "succeeded", 500.0, 2),
        ("b", "died", 50.0, 3),
        ("c", "failed", 700.0, 1),
    ]:
        (runs / name / "job" / "result").mkdir(parents=True)
        (runs / name / "job" / "result" / "result.json").write_text(
            _job_result(name, status, total, attempts)
        )
        (runs / name / "result.json").write_text(json.dumps({"run_id": name, "job": {}}))  # an episode result
    return runs


def test_recorded_runs_from_job_results(tmp_path: Path) -> None:
    rec = read_recorded_runs(runs_dir(tmp_path))
    assert sorted(rec.durations_s) == [500.0, 700.0]  # the died job's partial time is not a duration
    assert (rec.attempts, rec.failed_attempts) == (6, 1 + 3)
    c = rec.apply(config())
    assert c.job_work.kind == "empirical" and c.failures.pod_death_per_attempt == pytest.approx(4 / 6)


def test_recorded_runs_from_a_ledger_deduplicated(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    rec = CostRecord(
        ts=datetime(2026, 1, 1),
        run_id="r1",
        kind="compute",
        model="local:cpu",
        usd=0.0,
        note="812.5 s at $0.0000/h",
    )
    agent = CostRecord(ts=datetime(2026, 1, 1), run_id="r1", kind="agent", model="x", note="")
    for path in (runs / "costs.jsonl", runs / "r1" / "costs.jsonl"):  # the global and the run's ledger
        path.write_text(rec.model_dump_json() + "\n" + agent.model_dump_json() + "\n")
    got = read_recorded_runs(runs)
    assert got.durations_s == (812.5,) and got.failure_rate is None
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no job durations"):
        read_recorded_runs(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        read_recorded_runs(tmp_path / "missing")


def _cli() -> typer.Typer:
    """A bare app holding only the command (the function works without the main app)."""
    app = typer.Typer()
    app.command()(simulate_cmd)
    return app


def test_cli_tiny_sweep_writes_table_json_and_plot(tmp_path: Path) -> None:
    out, plot = tmp_path / "r.json", tmp_path / "p.png"
    args = [
        "fleet",
        "simulate",
        "--jobs",
        "5",
        "--pods",
        "2",
        "--scale",
        "2,4",
        "--reap",
        "0,60,never",
        "--seeds",
        "3",
        "--batches",
        "2",
        "--gap",
        "120",
        "--plot",
        str(plot),
        "--json",
        str(out),
        "--from-runs",
        str(runs_dir(tmp_path)),
    ]
    res = CliRunner().invoke(main_app, args, env={"COLUMNS": "200"})  # as `metatrain fleet simulate`
    assert res.exit_code == 0, res.output
    assert "One batch" in res.output and "2 outer batches" in res.output and "2 job results" in res.output
    report = SweepReport.model_validate_json(out.read_text())
    assert [(s.label, s.pods, s.jobs_per_batch) for s in report.scaling] == [
        ("proportional", 2, 5),
        ("proportional", 4, 10),
        ("fixed", 2, 10),
        ("fixed", 4, 10),
    ]
    assert [(s.pods, s.reap_s, s.batches) for s in report.reap] == [
        (p, r, 2) for p in (2, 4) for r in (0.0, 60.0, None)
    ]
    assert all(s.seeds == 3 and s.metrics["utilisation"].n == 3 for s in report.reap)
    assert report.base.job_work.kind == "empirical"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_bad_input(tmp_path: Path) -> None:
    bad = CliRunner().invoke(_cli(), ["--scale", "16,x", "--plot", str(tmp_path / "p.png")])
    assert bad.exit_code == 2 and "comma-separated integers" in bad.output
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"gpus": [{"name": "a", "usd_per_hour": 1, "availability": 0}]}))
    res = CliRunner().invoke(_cli(), ["--config", str(cfg), "--seeds", "2"])
    assert res.exit_code == 2 and "can ever be provisioned" in res.output
