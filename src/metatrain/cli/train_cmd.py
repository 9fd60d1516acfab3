"""``metatrain train``: the outer RL loop (trainer ``local`` or ``tinker``) with a live progress view."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from metatrain.outer.metrics import read_jsonl

console = Console()
TRAINERS = ("local", "tinker")


def step_rows(log_dir: Path) -> list[dict[str, Any]]:
    """Training steps from the cookbook's ``metrics.jsonl`` (holdout-only lines excluded)."""
    return [m for m in read_jsonl(log_dir / "metrics.jsonl") if "env/all/reward/total" in m]


def _status(log_dir: Path) -> str:
    episodes = read_jsonl(log_dir / "episodes.jsonl")
    steps = step_rows(log_dir)
    last = steps[-1] if steps else {}
    reward = last.get("env/all/reward/total")
    valid = last.get("env/all/valid")
    parts = [f"episodes {len(episodes)}"]
    if reward is not None:
        parts.append(f"reward {reward:+.3f}")
    if valid is not None:
        parts.append(f"valid {valid:.0%}")
    return "  ".join(parts)


def summary_table(log_dir: Path) -> Table:
    """One row per training step: reward, its components, validation and job rates, holdout reward."""
    table = Table(
        "step", "reward", "validation", "job quality", "valid", "job ok", "holdout", title=str(log_dir)
    )
    holdout = {
        m.get("step"): m["test/env/all/reward/total"]
        for m in read_jsonl(log_dir / "metrics.jsonl")
        if "test/env/all/reward/total" in m
    }
    for m in step_rows(log_dir):
        step = m.get("step")
        h = holdout.get(step)
        table.add_row(
            str(step),
            f"{m.get('env/all/reward/total', 0.0):+.3f}",
            f"{m.get('env/all/episode/validation', 0.0):.3f}",
            f"{m.get('env/all/episode/job_quality', 0.0):+.3f}",
            f"{m.get('env/all/valid', 0.0):.0%}",
            f"{m.get('env/all/job_succeeded', 0.0):.0%}",
            "" if h is None else f"{h:+.3f}",
        )
    return table


def _watch(log_dir: Path, steps: int, stop: threading.Event) -> None:
    columns = (
        TextColumn("outer steps"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("starting", total=steps)
        while not stop.wait(2.0):
            bar.update(task, completed=len(step_rows(log_dir)), description=_status(log_dir))
        bar.update(task, completed=len(step_rows(log_dir)), description=_status(log_dir))


def train(
    trainer: Annotated[
        str, typer.Option(help="Outer trainer: local (torch+peft here) or tinker (hosted)")
    ] = "local",
    families: Annotated[
        str, typer.Option(help="Comma-separated training families (never the held-out one)")
    ] = "calc_chain",
    steps: Annotated[int, typer.Option(min=1, help="Training steps (batches)")] = 54,
    group_size: Annotated[
        int, typer.Option(min=2, help="Episodes per group (advantages centred per group)")
    ] = 8,
    groups_per_batch: Annotated[int, typer.Option(min=1, help="Groups per training step")] = 5,
    log_dir: Annotated[Path, typer.Option(help="Run directory: checkpoints, metrics.jsonl, episodes")] = Path(
        "runs/outer"
    ),
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --log-dir from its last checkpoint")
    ] = False,
    inner: Annotated[str, typer.Option(help="real (train and score each job) or validation-only")] = "real",
    agent_model: Annotated[str | None, typer.Option(help="Agent model (trainer default if unset)")] = None,
    renderer: Annotated[
        str | None, typer.Option(help="Cookbook renderer ('chat-template': the tokenizer's own template)")
    ] = None,
    loss: Annotated[str, typer.Option(help="importance_sampling or ppo")] = "importance_sampling",
    lr: Annotated[float, typer.Option(min=0.0, help="Learning rate")] = 4e-5,
    lora_rank: Annotated[int, typer.Option(min=1)] = 8,
    max_steps_off_policy: Annotated[int, typer.Option(min=0)] = 2,
    max_tokens: Annotated[int, typer.Option(min=16, help="Sampled tokens per agent turn")] = 4096,
    max_turns: Annotated[int, typer.Option(min=1, help="Agent turns per episode")] = 12,
    holdout_every: Annotated[
        int, typer.Option(min=0, help="Evaluate on the held-out family every K steps")
    ] = 10,
    load_checkpoint: Annotated[str | None, typer.Option(help="Warm start from this checkpoint path")] = None,
    device: Annotated[str, typer.Option(help="Inner jobs: cpu or cuda[:N]")] = "cpu",
    agent_device: Annotated[str, typer.Option(help="Local trainer: auto, cpu or cuda[:N]")] = "auto",
    budget: Annotated[str, typer.Option(help="Inner budget: fast or full")] = "fast",
    provider: Annotated[str, typer.Option(help="Compute provider for inner jobs (--inner real)")] = "local",
) -> None:
    """Train the agent with RL on episode rewards (tinker-cookbook's loop; docs/outer-rl.md)."""
    from pydantic import ValidationError

    from metatrain.plugins import PluginError, load_plugins

    if trainer not in TRAINERS:
        console.print(f"[red]error:[/] --trainer must be one of {', '.join(TRAINERS)}, not {trainer!r}")
        raise typer.Exit(2)
    options: dict[str, Any] = {
        "log_dir": log_dir,
        "families": [f for f in families.split(",") if f.strip()],
        "steps": steps,
        "group_size": group_size,
        "groups_per_batch": groups_per_batch,
        "loss_fn": loss,
        "learning_rate": lr,
        "lora_rank": lora_rank,
        "max_steps_off_policy": max_steps_off_policy,
        "max_tokens": max_tokens,
        "holdout_every": holdout_every,
        "load_checkpoint_path": load_checkpoint,
        "agent_model": agent_model,
        "episode": {
            "inner": inner,
            "device": device,
            "budget": budget,
            "max_turns": max_turns,
            "provider": provider,
        },
        "resume": resume,
        "device": agent_device,
    }
    if renderer is not None:
        options["renderer"] = None if renderer == "chat-template" else renderer
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(log_dir, steps, stop), daemon=True)
    try:
        outer_trainer = load_plugins().get("outer_trainers", trainer)
        watcher.start()
        outer_trainer.train(options)
    except (PluginError, ValidationError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
    console.print(summary_table(log_dir))
    console.print(f"metrics: {log_dir / 'metrics.jsonl'}  episodes: {log_dir / 'episodes.jsonl'}")


def register(app: typer.Typer) -> None:
    """Add ``train`` to the CLI."""
    app.command("train")(train)
