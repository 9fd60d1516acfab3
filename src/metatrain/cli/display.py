"""Rich rendering of episode progress and results."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from metatrain.specs import EpisodeResult


class EpisodeDisplay:
    """Turns progress events into rich progress bars and log lines.

    Progress bars draw only on a terminal; where output goes to a file or a pipe (nohup, CI, a pod's
    log), the same events are written as log lines as they happen: each training step, and each
    eval at every quarter and at its end.
    """

    def __init__(self, console: Console, lines: bool | None = None) -> None:
        self.console = console
        self.lines = not console.is_terminal if lines is None else lines
        self._eval_logged: dict[str, int] = {}
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> EpisodeDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _task(self, key: str, description: str, total: float | None) -> Any:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total, info="")
        return self.tasks[key]

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        log = self.progress.console.log
        if event == "phase":
            name = data["name"]
            if name == "workspace":
                log(f"workspace: {data['run_dir']}/workspace")
            elif name == "validation":
                log(f"validation probe: attempt {data['attempt']}")
            elif name == "queue":
                log(f"queued job {data['job_id']}")
            elif name == "prepare_model":
                log(f"preparing model {data['model']}")
            elif name == "train":
                self._task("train", "training (GRPO)", data.get("max_steps"))
            elif name == "agent":
                log(f"agent: {data['agent']}")
        elif event == "turn":
            log(f"turn {data['turn']}: {', '.join(data['tools']) or '(no tool call)'}")
        elif event == "validation":
            verdict = "[green]valid[/]" if data["ok"] else "[red]invalid[/]"
            log(f"validation attempt {data['attempt']}: {verdict} ({data['seconds']:.1f}s)")
            for err in data["errors"][:8]:
                log(f"  - {err}")
        elif event == "eval":
            key = data["phase"]
            label = "pre-eval (hidden)" if key == "pre_eval" else "post-eval (hidden)"
            task = self._task(key, label, data["total"])
            self.progress.update(task, completed=data["done"])
            if self.lines:
                self._eval_line(key, label, data["done"], data["total"])
        elif event == "step":
            task = self._task("train", "training (GRPO)", data.get("max_steps"))
            info = f"reward {data['reward']:.3f}" if "reward" in data else ""
            self.progress.update(task, completed=data.get("step", 0), info=info)
            if self.lines:
                of = f"/{data['max_steps']}" if data.get("max_steps") else ""
                log(f"training step {data.get('step', 0)}{of}" + (f": {info}" if info else ""))

    def _eval_line(self, key: str, label: str, done: int, total: int) -> None:
        """Log an eval's progress once per quarter reached, and at its end."""
        quarter = 4 if done >= total else (4 * done) // max(total, 1)
        if quarter > self._eval_logged.get(key, 0):
            self._eval_logged[key] = quarter
            self.progress.console.log(f"{label}: {done}/{total}")


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def summary_table(result: EpisodeResult) -> Table:
    """The end-of-episode summary."""
    r, j = result.reward, result.job
    table = Table(title=f"episode {result.run_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")

    def fmt(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f}"

    w = r.weights
    rows = [
        ("reward", f"{r.total:.3f}  ({r.outcome})"),
        ("  validation", f"{fmt(r.validation)} × {w['validation']}"),
        ("  job quality", f"{fmt(r.job_quality)} × {w['job_quality']}"),
        ("  train speed", f"{fmt(r.train_speed)} × {w['train_speed']}"),
        (
            "validation attempts",
            f"{result.validation.attempts} ({'valid' if result.validation.valid else 'never valid'})",
        ),
        ("base model", result.model or "—"),
        ("job status", j.status if not j.error else f"{j.status}: {_first_line(j.error)}"),
        ("pre / post score", f"{fmt(j.pre_score)} / {fmt(j.post_score)}  (hidden eval n={j.eval_n})"),
        ("best_pre", fmt(j.best_pre)),
        ("uplift", fmt(j.uplift)),
        (
            "train wall time",
            f"{j.train_seconds:.1f} s ({j.train_steps} steps"
            + (f", {j.skipped_updates} without reward signal (no update)" if j.skipped_updates else "")
            + (
                f", {j.dropped_micro_batches} micro-batches dropped for a non-finite gradient"
                if j.dropped_micro_batches
                else ""
            )
            + (", stopped on a non-finite gradient before its update" if j.diverged else "")
            + (", stopped before the wall)" if j.stopped_at_deadline else ")"),
        ),
        ("agent tokens in / out", f"{result.cost.tokens_in} / {result.cost.tokens_out}"),
        ("agent USD", f"${result.cost.usd:.4f}"),
        ("episode wall time", f"{result.wall_seconds:.1f} s"),
        ("run directory", result.run_dir),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def message_line(message: dict[str, Any], width: int) -> str:
    """One chat message on one line: its text (newlines as ⏎) and ``→ tool(args)`` per tool call,
    cut to ``width`` characters."""
    text = str(message.get("content") or "")
    calls = [
        f"{c['function']['name']}({json.dumps(c['function'].get('arguments'), sort_keys=True)})"
        for c in message.get("tool_calls") or []
    ]
    line = " ".join(filter(None, [text.replace("\n", " ⏎ "), *(f"→ {c}" for c in calls)]))
    return line if len(line) <= width else line[: width - 1] + "…"
