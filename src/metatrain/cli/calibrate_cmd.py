"""``metatrain calibrate``: score untrained models on a family's candidate difficulty levels."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from metatrain.cli.models_or_exit import prepared_model
from metatrain.conformance.calibration import (
    CALIBRATION_BAND,
    CalibrationReport,
    LevelResult,
    ModelPlayer,
    calibrate,
    choose_level,
    family_levels,
)
from metatrain.conformance.guessing import GUESS_FLOOR_LIMIT
from metatrain.training.evaluation import eval_dtype

DTYPES = ("float32", "bfloat16", "float16")

console = Console()


def level_table(results: Sequence[LevelResult], models: Sequence[str]) -> Table:
    """One row per level: its eval's turns, guess floor, each model's score and interval, in band."""
    table = Table("level", "turns", "guess floor", *models, "in band")
    for r in results:
        by_model = {s.model: s for s in r.scores}
        cells = [
            f"{s.score:.3f} [{s.ci95[0]:.3f}, {s.ci95[1]:.3f}] n={s.n}, {s.tool_calls_per_rollout:.1f} calls"
            if (s := by_model.get(m))
            else "—"
            for m in models
        ]
        floor = f"{r.guess_floor:.3f}" + ("" if r.guess_floor < GUESS_FLOOR_LIMIT else " (too high)")
        label = f"{r.label} (current)" if r.current and r.label != "current" else r.label
        table.add_row(label, str(r.eval_max_turns), floor, *cells, "[green]yes[/]" if r.in_band() else "no")
    return table


def calibrate_cmd(
    name: Annotated[str, typer.Argument(help="Registered family name")],
    budget: Annotated[str, typer.Option(help="fast or full")] = "full",
    models: Annotated[
        str | None, typer.Option(help="Comma-separated model keys (default: the budget's allowed models)")
    ] = None,
    level: Annotated[
        list[str] | None, typer.Option(help="Only this level (repeatable; default: every level)")
    ] = None,
    device: Annotated[str, typer.Option()] = "cpu",
    limit: Annotated[
        int | None, typer.Option(min=1, help="Score only the first N hidden-eval examples of each level")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Conversations generated at once")] = 64,
    dtype: Annotated[
        str | None,
        typer.Option(help="Decode in float32, bfloat16 or float16 (default: the hidden eval's dtype)"),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON")] = None,
) -> None:
    """Score untrained models on each candidate difficulty level of a family (its hidden-eval draw at
    that level, greedy, as the eval plays) with each level's guess floor, and name the hardest level
    whose best score is in the calibration band. Writes no baselines."""
    from metatrain.plugins import PluginError, load_plugins

    try:
        family = load_plugins().task_family(name)
        if budget not in ("fast", "full"):
            raise ValueError(f"budget must be fast or full, got {budget!r}")
        levels = family_levels(family, budget, level or ())
        if dtype not in (None, *DTYPES):
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    except (PluginError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    keys = models.split(",") if models else list(family.task_spec(budget).bounds.models)
    low, high = CALIBRATION_BAND
    first = f", first {limit} examples each" if limit else ""
    dtype = dtype or eval_dtype(budget, device)
    console.print(
        f"{name} {family.version} {budget}: {len(levels)} level(s) x {len(keys)} model(s) on {device}"
        f" in {dtype}{first}; band {low}-{high}, guess floor < {GUESS_FLOOR_LIMIT}"
    )
    model_dirs = {key: prepared_model(console, key) for key in keys}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        current: list[TaskID] = []

        def on_start(model: str, label: str, n: int) -> None:
            current[:] = [bar.add_task(f"{model} · {label}", total=n)]

        def on_progress(done: int) -> None:
            bar.advance(current[0], done)

        player = ModelPlayer(budget, device, model_dirs, batch_size, on_start, on_progress, dtype)
        results = calibrate(family, budget, keys, player, limit, level or ())
    console.print(level_table(results, keys))
    chosen = choose_level(results)
    if chosen:
        console.print(f"hardest level in the band: [bold]{chosen}[/]")
    else:
        console.print("no level is in the band")
    if json_out is not None:
        report = CalibrationReport(
            family=name,
            version=family.version,
            command="metatrain " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            budget=budget,
            device=device,
            limit=limit,
            dtype=dtype,
            levels=tuple(results),
            chosen=chosen,
        )
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(report.model_dump_json(indent=2) + "\n")
        console.print(f"wrote {json_out}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
