"""Training rollouts kept beside ``metrics.jsonl``: what the model wrote, not only its averages.

Why: on an H200, multi_hop's training reward rose while its eval fell to 0.01, and the counts
(5 tool calls a rollout, hop credit 0.99, answers right 0.17) could only suggest why. A few
rollouts a step in ``samples.jsonl`` (the job's own training questions, never the hidden eval)
show the answer and every tool result next to the rewards they earned. The TRL backend takes them
from the trainer's logs; the prime-rl backend from the training rollouts prime-rl saves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metatrain.outer.metrics import read_jsonl

SAMPLES_PER_STEP = 4


def pick(n: int, k: int, best: int | None = None) -> list[int]:
    """``k`` indices spread evenly over ``range(n)``, plus ``best`` when it is not among them;
    sorted, no repeats."""
    if n <= 0 or k <= 0:
        return []
    m = min(k, n)
    chosen = {i * n // m for i in range(m)}
    if best is not None and 0 <= best < n:
        chosen.add(best)
    return sorted(chosen)


def _question(prompt: Any) -> str:
    """The last user message of a chat prompt (the prompt itself when it is a string)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    return str(users[-1]) if users else ""


def sample_rows(step: int, logs: Mapping[str, Any], k: int = SAMPLES_PER_STEP) -> list[dict[str, Any]]:
    """Rows for ``samples.jsonl`` from TRL's GRPO logs of the latest generation batch: ``prompt``,
    ``completion`` (message lists), ``rewards`` (per reward function) and ``advantages``, aligned by
    index. Picks ``k`` rollouts spread over the batch and the most reinforced one (highest advantage)."""
    prompts: Sequence[Any] = list(logs.get("prompt", ()))
    completions: Sequence[Any] = list(logs.get("completion", ()))
    rewards = {name: list(values) for name, values in dict(logs.get("rewards", {})).items()}
    advantages = list(logs.get("advantages", ()))
    n = min(len(prompts), len(completions))
    scored = [i for i in range(n) if i < len(advantages) and isinstance(advantages[i], int | float)]
    best = max(scored, key=lambda i: float(advantages[i])) if scored else None
    return [
        {
            "step": step,
            "index": i,
            "question": _question(prompts[i]),
            "completion": completions[i],
            "rewards": {name: v[i] for name, v in rewards.items() if i < len(v)},
            "advantage": advantages[i] if i < len(advantages) else None,
        }
        for i in pick(n, k, best)
    ]


def append_samples(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append ``rows`` to a JSONL file (values JSON cannot hold, such as tensors, become strings)."""
    if not rows:
        return
    with path.open("a") as fh:
        for row in rows:
            fh.write(json.dumps(row, default=str) + "\n")


PRIME_RL_ROLLOUTS = "train_rollouts.jsonl"


def prime_rl_rows(rollout_dir: Path, k: int = SAMPLES_PER_STEP) -> list[dict[str, Any]]:
    """Rows for ``samples.jsonl`` from the training rollouts prime-rl 0.6 saves under its
    orchestrator's ``rollouts/step_N/train_rollouts.jsonl``: verifiers ``RolloutOutput`` dicts
    (``prompt``, ``completion``, ``metrics`` with each rubric function's score) plus prime-rl's
    ``advantage``. Step N is reported as N + 1, as ``metrics.jsonl`` numbers steps. A line that is
    not JSON is skipped: a run stopped at its wall can leave the last one half written."""
    steps: list[tuple[int, Path]] = []
    for step_dir in rollout_dir.glob("step_*"):
        suffix = step_dir.name.removeprefix("step_")
        if suffix.isdigit() and (step_dir / PRIME_RL_ROLLOUTS).is_file():
            steps.append((int(suffix), step_dir / PRIME_RL_ROLLOUTS))
    rows: list[dict[str, Any]] = []
    for number, path in sorted(steps):
        records = [r for r in read_jsonl(path) if isinstance(r, dict)]
        names = sorted({name for r in records for name in (r.get("metrics") or {})})
        logs = {
            "prompt": [r.get("prompt") for r in records],
            "completion": [r.get("completion") for r in records],
            "rewards": {name: [(r.get("metrics") or {}).get(name) for r in records] for name in names},
            "advantages": [r.get("advantage") for r in records],
        }
        rows.extend(sample_rows(number + 1, logs, k))
    return rows
