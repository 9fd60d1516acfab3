"""``metatrain samples``: show the training rollouts a job kept (``train/samples.jsonl``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from metatrain.cli.display import message_line

console = Console()

SAMPLES_FILE = "samples.jsonl"
_PLACES = (Path("job/result/train"), Path("train"), Path("."))


def find_samples(run: Path) -> Path:
    """``samples.jsonl`` of an episode run folder, a job result folder or its ``train/`` folder."""
    for place in _PLACES:
        path = run / place / SAMPLES_FILE
        if path.is_file():
            return path
    looked = ", ".join(str(run / place / SAMPLES_FILE) for place in _PLACES)
    raise FileNotFoundError(f"no {SAMPLES_FILE} under {run} (looked at {looked}); training writes it")


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``samples.jsonl``; a line that is not JSON is an error naming its line number."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from exc
    return rows


def _number(value: Any) -> str:
    """A score to two decimals; anything else (a missing score is None) as it is."""
    return f"{value:.2f}" if isinstance(value, int | float) else str(value)


def samples(
    run: Annotated[Path, typer.Argument(help="An episode run folder (runs/<id>) or a job result folder")],
    step: Annotated[
        int | None, typer.Option(help="Training step to show (default: the last step kept; 0: every step)")
    ] = None,
    width: Annotated[int, typer.Option(min=40, help="Characters shown per message")] = 240,
) -> None:
    """Show the training rollouts a job kept: each question, what the model called and answered,
    and what every reward function gave it. Training questions only, never the hidden eval."""
    try:
        rows = read_samples(find_samples(run))
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    steps = sorted({int(r["step"]) for r in rows})
    if not steps:
        console.print("no samples kept (training ended before its first step)")
        return
    wanted = steps[-1] if step is None else step
    if wanted and wanted not in steps:
        console.print(f"[red]error:[/] no samples for step {wanted}; kept steps: {steps[0]}..{steps[-1]}")
        raise typer.Exit(2)
    for r in rows:
        if wanted and int(r["step"]) != wanted:
            continue
        rewards = "  ".join(f"{name} {_number(value)}" for name, value in r.get("rewards", {}).items())
        advantage = r.get("advantage")
        adv = f"  advantage {advantage:+.2f}" if isinstance(advantage, int | float) else ""
        console.rule(f"step {r['step']}  rollout {r.get('index')}  {rewards}{adv}")
        console.print(Text.assemble(("question", "bold"), ": ", r.get("question", "")), highlight=False)
        completion = r.get("completion")
        messages = (
            completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
        )
        for m in messages:
            console.print(
                Text.assemble((str(m.get("role")), "bold"), ": ", message_line(m, width)), highlight=False
            )


def register(app: typer.Typer) -> None:
    app.command("samples")(samples)
