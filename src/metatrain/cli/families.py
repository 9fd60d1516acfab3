"""``metatrain families``, ``metatrain check-family`` and ``metatrain transcripts``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from metatrain.cli.display import message_line
from metatrain.cli.models_or_exit import prepared_model

console = Console()


def families() -> None:
    """List the registered task families (held-out ones marked), their baselines, and where the best
    untrained model's ``full`` score lies against the calibration band (0.05-0.8)."""
    from metatrain.baselines import StaleBaselinesError, best_pre, load_baselines
    from metatrain.conformance.calibration import band_note
    from metatrain.plugins import load_plugins

    pm = load_plugins()
    table = Table(
        "family",
        "version",
        "held out",
        "eval n (fast/full)",
        "baselines",
        "best untrained (full)",
        "distribution",
    )
    for reg in pm.registrations("task_families"):
        fam = reg.obj
        states, best = [], "—"
        for budget in ("fast", "full"):
            allowed = list(fam.task_spec(budget).bounds.models)
            try:
                entry = load_baselines(fam, budget, allowed)
                states.append(f"{budget}: ok")
            except StaleBaselinesError:
                states.append(f"{budget}: stale")
                continue
            if budget == "full":
                scores = {m: entry.models[m].score for m in allowed}
                score = best_pre(entry, allowed)
                tops = [m for m, x in scores.items() if x == score]
                who = "every model" if len(tops) == len(allowed) > 1 else ", ".join(tops)
                best = f"{score:.3f} {who}, {band_note(score)}"
        n = "/".join(str(fam.task_spec(b).eval_n) for b in ("fast", "full"))
        table.add_row(
            fam.name,
            fam.version,
            "[bold]HELD OUT[/]" if fam.held_out else "",
            n,
            ", ".join(states),
            best,
            reg.distribution,
        )
    console.print(table)


def check_family(
    name: Annotated[str, typer.Argument(help="Registered family name")],
    budget: Annotated[
        list[str] | None, typer.Option(help="Budgets to check (default: fast and full)")
    ] = None,
) -> None:
    """Run the conformance kit on one family; exit 1 if any check fails."""
    from metatrain.conformance import check_family as run_checks
    from metatrain.plugins import PluginError, load_plugins

    try:
        family = load_plugins().task_family(name)
    except PluginError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    results = run_checks(family, tuple(budget or ("fast", "full")))
    table = Table("budget", "check", "result", "detail")
    for r in results:
        table.add_row(r.budget, r.name, "[green]pass[/]" if r.ok else "[red]FAIL[/]", r.detail[:400])
    console.print(table)
    bad = [r for r in results if not r.ok]
    console.print(f"{len(results) - len(bad)} passed, {len(bad)} failed")
    if bad:
        raise typer.Exit(1)


def default_model(family: Any, budget: str) -> str:
    """The allowed model with the best frozen baseline, ties (and missing baselines) going to the
    larger model: the one most likely to show what the task asks of a model."""
    from metatrain.baselines import StaleBaselinesError, load_baselines
    from metatrain.models import EMBEDDED_MODELS

    allowed = list(family.task_spec(budget).bounds.models)
    try:
        scores = {k: e.score for k, e in load_baselines(family, budget, allowed).models.items()}
    except StaleBaselinesError:
        scores = {}

    def size(key: str) -> int:
        model = EMBEDDED_MODELS.get(key)
        return model.params if model else 0

    return max(allowed, key=lambda key: (scores.get(key, 0.0), size(key)))


def transcripts(
    name: Annotated[str, typer.Argument(help="Registered family name")],
    budget: Annotated[str, typer.Option(help="fast or full")] = "full",
    model: Annotated[
        str | None,
        typer.Option(help="Embedded model key or a model folder (default: the best baseline model)"),
    ] = None,
    n: Annotated[int, typer.Option(min=1, help="How many dev examples to play")] = 5,
    device: Annotated[str, typer.Option()] = "cpu",
    width: Annotated[int, typer.Option(min=40, help="Characters shown per message")] = 240,
    out: Annotated[Path | None, typer.Option(help="Also write one JSON line per example")] = None,
    level: Annotated[
        str | None,
        typer.Option(help="A calibration level's label (metatrain calibrate lists them): its dev examples"),
    ] = None,
) -> None:
    """Play an untrained model on a family's dev examples, as the hidden eval plays, and show the
    conversations: what it calls, what it answers, what the scorer gives. Never the hidden eval."""
    from metatrain.conformance.calibration import family_levels
    from metatrain.plugins import PluginError, load_plugins
    from metatrain.training.evaluation import eval_dtype, load_model, play, score_rollouts

    try:
        family = load_plugins().task_family(name)
    except PluginError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if budget not in ("fast", "full"):
        console.print(f"[red]error:[/] budget must be fast or full, got {budget!r}")
        raise typer.Exit(2)
    key = model or default_model(family, budget)
    if level is not None:
        try:
            family = family_levels(family, budget, [level])[level]
        except ValueError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
    examples = list(family.task_spec(budget).dev_examples)[:n]
    model_dir = Path(key) if Path(key).is_dir() else prepared_model(console, key)
    at = f", level {level!r}" if level is not None else ""
    console.print(f"{name} {budget}{at}: {len(examples)} dev examples, model {key}, {device}")
    t0 = time.monotonic()
    lm, tokenizer = load_model(model_dir, device, eval_dtype(budget, device))
    rollouts = play(family, budget, examples, lm, tokenizer, batch_size=len(examples))
    report = score_rollouts(family, examples, rollouts, t0)
    rows = []
    for ex, r, score in zip(examples, rollouts, report.scores, strict=True):
        console.rule(f"{ex.id}  answer {ex.answer!r}  score {score:.2f}  tool calls {r.tool_calls}")
        for m in r.messages[1:]:
            console.print(Text.assemble((m["role"], "bold"), ": ", message_line(m, width)), highlight=False)
        rows.append(
            {
                "id": ex.id,
                "answer": ex.answer,
                "score": score,
                "tool_calls": r.tool_calls,
                "tool_errors": r.tool_errors,
                "malformed": r.malformed,
                "final_text": r.final_text,
                "messages": r.messages,
            }
        )
    console.print(
        f"score {report.score:.2f}, tool calls per rollout {report.tool_calls_per_rollout:.1f}, "
        f"malformed per rollout {report.malformed_per_rollout:.1f} ({report.n} dev examples)"
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(x, default=str) + "\n" for x in rows))
        console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("families")(families)
    app.command("check-family")(check_family)
    app.command("transcripts")(transcripts)
