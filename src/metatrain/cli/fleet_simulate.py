"""``metatrain fleet simulate``: sweep the fleet simulator over pool sizes and idle-reap settings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

if TYPE_CHECKING:  # the simulator (numpy, pydantic models) loads when the command runs
    from metatrain.fleet.simulator import Interval, Scenario, ScenarioSummary, SweepReport

console = Console()


def parse_ints(text: str, what: str) -> list[int]:
    """``"16,100,1000"`` → ``[16, 100, 1000]``; every value a positive integer."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise typer.BadParameter(f"{what}: expected positive integers, got {text!r}")
    return values


def parse_reaps(text: str) -> list[float | None]:
    """``"0,60,300,never"`` → ``[0.0, 60.0, 300.0, None]`` (seconds; ``never`` keeps idle pods)."""
    out: list[float | None] = []
    for v in (v.strip() for v in text.split(",") if v.strip()):
        if v.lower() in ("never", "none"):
            out.append(None)
            continue
        try:
            seconds = float(v)
        except ValueError:
            raise typer.BadParameter(f"--reap: expected seconds or 'never', got {v!r}") from None
        if seconds < 0:
            raise typer.BadParameter(f"--reap: seconds must be >= 0, got {v!r}")
        out.append(seconds)
    if not out:
        raise typer.BadParameter("--reap: give at least one value")
    return out


def simulate(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs per outer batch at the base pool size")] = 40,
    pods: Annotated[
        int, typer.Option(min=1, help="Base pool size (max pods); jobs/pods is the scaling ratio")
    ] = 16,
    scale: Annotated[str, typer.Option(help="Pool sizes to sweep, comma-separated")] = "16,100,1000",
    reap: Annotated[str, typer.Option(help="Idle-reap settings (s) to sweep; 'never' keeps idle pods")] = (
        "0,60,300,900"
    ),
    seeds: Annotated[int, typer.Option(min=2, max=10_000, help="Seeds per scenario (mean ± 95% CI)")] = 20,
    batches: Annotated[int, typer.Option(min=1, help="Outer batches in the reap sweep")] = 3,
    gap: Annotated[float, typer.Option(min=0.0, help="Seconds from a batch's end to the next batch")] = 600.0,
    spread: Annotated[
        float, typer.Option(min=0.0, help="A batch's jobs arrive uniformly over this many seconds")
    ] = 0.0,
    big_batch: Annotated[
        int | None,
        typer.Option(min=1, help="Fixed batch run on every pool size (default: jobs/pods × largest)"),
    ] = None,
    from_runs: Annotated[
        Path | None, typer.Option(help="Runs directory: resample job durations (and failures) from it")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="SimConfig JSON (GPUs, prices, delays, ...); the options above override its pods, workload"
        ),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Save the plot here (PNG)")] = Path("fleet_scaling.png"),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every summary as JSON here")] = None,
) -> None:
    """Simulate the queue + warm pod pool: utilisation, cost per job, wall time, by pool size and reap."""
    from pydantic import ValidationError

    from metatrain.fleet.simulator import (
        SimConfig,
        SweepReport,
        read_recorded_runs,
        reap_scenarios,
        scaling_scenarios,
        with_,
    )

    pool_sizes = parse_ints(scale, "--scale")
    reaps = parse_reaps(reap)
    try:
        base = SimConfig.model_validate_json(config.read_text()) if config else SimConfig()
        base = with_(
            base,
            max_pods=pods,
            workload__jobs_per_batch=jobs,
            workload__batches=batches,
            workload__gap_s=gap,
            workload__spread_s=spread,
        )
    except (OSError, ValidationError) as exc:
        console.print(f"[red]error:[/] bad simulator config: {exc}")
        raise typer.Exit(2) from None
    source = f"{base.job_work.kind} job work (parameters)"
    if from_runs is not None:
        try:
            recorded = read_recorded_runs(from_runs)
        except (OSError, ValueError) as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from None
        base = recorded.apply(base)
        rate = recorded.failure_rate
        source = recorded.source + (f", failure rate {rate:.3f} per attempt" if rate is not None else "")
    console.print(f"job durations: {source}")
    big = big_batch or max(1, round(jobs / pods * max(pool_sizes)))
    scaling = scaling_scenarios(base, pool_sizes, big)
    reaping = reap_scenarios(base, pool_sizes, reaps)
    scaling_out, reap_out = _run_with_progress(scaling, reaping, seeds)

    console.print(scaling_table(scaling_out))
    console.print(reap_table(reap_out, batches, gap))
    report = SweepReport(
        base=base, seeds=seeds, durations=source, scaling=tuple(scaling_out), reap=tuple(reap_out)
    )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(report.model_dump_json(indent=2) + "\n")
        console.print(f"wrote {json_out}")
    if plot is not None:
        save_plot(report, plot)
        console.print(f"wrote {plot}")


def _run_with_progress(
    scaling: Sequence[Scenario], reaping: Sequence[Scenario], seeds: int
) -> tuple[list[ScenarioSummary], list[ScenarioSummary]]:
    from metatrain.fleet.simulator import run_scenarios

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=(len(scaling) + len(reaping)) * seeds)

        def tick(scn: Scenario, seed: int) -> None:
            c = scn.config
            bar.update(task, advance=1, description=f"{scn.label}: {c.max_pods} pods, reap {c.reap_s}")

        return (run_scenarios(scaling, range(seeds), tick), run_scenarios(reaping, range(seeds), tick))


def _pm(i: Interval | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    """``mean±half-width`` of a 95 % interval, scaled (e.g. seconds → minutes)."""
    if i is None:
        return "—"
    return f"{i.mean * scale:{fmt}}±{(i.hi - i.lo) / 2 * scale:{fmt}}"


def _mix(s: ScenarioSummary) -> str:
    shares = sorted(s.gpu_mix.items(), key=lambda kv: -kv[1])
    return " ".join(f"{name.removeprefix('2x ').removeprefix('RTX ')}:{share:.0%}" for name, share in shares)


# column header, metric, scale, format
_COLUMNS: dict[str, tuple[str, float, str]] = {
    "util %": ("utilisation", 100, ".1f"),
    "$/job": ("usd_per_job", 1, ".3f"),
    "total $": ("total_usd", 1, ".1f"),
    "wall min": ("batch_wall_s", 1 / 60, ".1f"),
    "p50 min": ("latency_p50_s", 1 / 60, ".1f"),
    "p95 min": ("latency_p95_s", 1 / 60, ".1f"),
    "died": ("died", 1, ".2f"),
    "idle pod-h": ("idle_s", 1 / 3600, ".1f"),
    "pods made": ("pods_provisioned", 1, ".0f"),
}


def _cells(s: ScenarioSummary, headers: Sequence[str]) -> list[str]:
    return [_pm(s.metrics.get(metric), k, fmt) for metric, k, fmt in (_COLUMNS[h] for h in headers)]


def scaling_table(rows: Sequence[ScenarioSummary]) -> Table:
    """One row per (batch kind, pool size) of the one-batch scaling sweep."""
    headers = ["util %", "$/job", "total $", "wall min", "p50 min", "p95 min", "died"]
    table = Table("batch", "pods", "jobs", *headers, "GPU mix", title="One batch (mean ± 95% CI over seeds)")
    for s in rows:
        table.add_row(s.label, str(s.pods), str(s.jobs_per_batch), *_cells(s, headers), _mix(s))
    return table


def reap_table(rows: Sequence[ScenarioSummary], batches: int, gap: float) -> Table:
    """One row per (pool size, reap setting) of the multi-batch sweep."""
    headers = ["util %", "$/job", "total $", "wall min", "p95 min", "idle pod-h", "pods made"]
    title = f"{batches} outer batches, {gap:g} s from a batch's end to the next (mean ± 95% CI over seeds)"
    table = Table("pods", "jobs/batch", "reap s", *headers, title=title)
    for s in rows:
        reap = "never" if s.reap_s is None else f"{s.reap_s:g}"
        table.add_row(str(s.pods), str(s.jobs_per_batch), reap, *_cells(s, headers))
    return table


def save_plot(report: SweepReport, path: Path) -> None:
    """Six panels: utilisation, $/job and batch wall time against pool size and against idle reap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), dpi=72)
    for col, metric in enumerate(("util %", "$/job", "wall min")):
        key, k, _ = _COLUMNS[metric]
        ax = axes[0][col]
        for label in ("proportional", "fixed"):
            rows = [s for s in report.scaling if s.label == label and key in s.metrics]
            if rows:
                what = (
                    f"{rows[0].jobs_per_batch / rows[0].pods:g} jobs/pod"
                    if label == "proportional"
                    else (f"{rows[0].jobs_per_batch} jobs")
                )
                _errorbar(ax, [s.pods for s in rows], [s.metrics[key] for s in rows], k, f"{label}: {what}")
        ax.set_xscale("log")
        ax.set_xticks(sorted({s.pods for s in report.scaling}))
        if metric == "wall min":
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        reap = report.scaling[0].reap_s if report.scaling else None
        ax.set(
            xlabel="max pods",
            ylabel=metric,
            title=f"{metric}: one batch, " + (f"reap {reap:g} s" if reap is not None else "no reap"),
        )
        ax.legend(fontsize=8)
        ax = axes[1][col]  # the multi-batch sweep; "never" has no place on this axis
        for pods in sorted({s.pods for s in report.reap}):
            rows = [s for s in report.reap if s.pods == pods and s.reap_s is not None and key in s.metrics]
            _errorbar(ax, [s.reap_s or 0.0 for s in rows], [s.metrics[key] for s in rows], k, f"{pods} pods")
        batches, gap = (report.reap[0].batches if report.reap else 0), report.base.workload.gap_s
        ax.set(xlabel="idle reap, s", ylabel=metric, title=f"{metric}: {batches} batches, gap {gap:g} s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _errorbar(ax: Any, xs: Sequence[float], ys: Sequence[Interval], k: float, label: str) -> None:
    mean = [y.mean * k for y in ys]
    err = [[(y.mean - y.lo) * k for y in ys], [(y.hi - y.mean) * k for y in ys]]
    ax.errorbar(xs, mean, yerr=err, marker="o", capsize=3, label=label)
