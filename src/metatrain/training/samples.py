"""Training rollouts kept beside ``metrics.jsonl``: what the model wrote, not only its averages.

Why: on an H200, multi_hop's training reward rose while its eval fell to 0.01, and the counts
(5 tool calls a rollout, hop credit 0.99, answers right 0.17) could only suggest why. A few
rollouts a step in ``samples.jsonl`` (the job's own training questions, never the hidden eval)
show the answer and every tool result next to the rewards they earned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
    scored = [i for i in range(n) if i < len(advantages)]
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
