"""Hidden-eval scoring: load weights only, play the family's eval with its own tools and scorer.

Run as its own process (``python -m metatrain.training.evaluation``) so the post-eval never shares
a process with agent-written code.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from metatrain.protocols import TaskFamily
from metatrain.specs import Example, TaskSpec


@attrs.frozen
class EvalReport:
    """Score of one model on one family's hidden eval."""

    score: float
    n: int
    ci95: tuple[float, float]
    tool_calls_per_rollout: float
    malformed_per_rollout: float
    seconds: float
    scores: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def interval95(scores: list[float]) -> tuple[float, float]:
    """Wilson interval for 0/1 scores, normal approximation otherwise."""
    n = len(scores)
    if n == 0:
        return (0.0, 0.0)
    mean = sum(scores) / n
    z = 1.959964
    if all(s in (0.0, 1.0) for s in scores):
        denom = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denom
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denom
        return (max(0.0, centre - half), min(1.0, centre + half))
    var = sum((s - mean) ** 2 for s in scores) / max(1, n - 1)
    half = z * math.sqrt(var / n)
    return (max(0.0, mean - half), min(1.0, mean + half))


def eval_conversation(spec: TaskSpec, example: Example) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": spec.eval.system_prompt},
        {"role": "user", "content": example.prompt},
    ]


def tool_schemas(spec: TaskSpec) -> list[dict[str, Any]]:
    return [{"type": "function", "function": t.model_dump()} for t in spec.eval.tools]


def eval_dtype(budget: str, device: str) -> str:
    """``float32`` for a ``fast`` eval on any device, so a GPU-seeded fast baseline decodes as a CPU
    episode does; ``bfloat16`` for other budgets on CUDA."""
    return "bfloat16" if device.startswith("cuda") and budget != "fast" else "float32"


def load_model(model_dir: Path, device: str, dtype: str = "float32") -> tuple[Any, Any]:
    """Load safetensors weights only (no remote code) in ``dtype`` (a torch dtype name) and the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model: Any = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), use_safetensors=True, trust_remote_code=False
    )
    model = model.to(device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    return model, tokenizer


def score_rollouts(family: TaskFamily, examples: list[Example], rollouts: list[Any], t0: float) -> EvalReport:
    """Score played-out eval conversations with the family's scorer (``t0``: when the eval started)."""
    scores = [family.score(ex, r.final_text) for ex, r in zip(examples, rollouts, strict=True)]
    n = len(scores)
    return EvalReport(
        score=sum(scores) / n,
        n=n,
        ci95=interval95(scores),
        tool_calls_per_rollout=sum(r.tool_calls for r in rollouts) / n,
        malformed_per_rollout=sum(r.malformed for r in rollouts) / n,
        seconds=time.monotonic() - t0,
        scores=tuple(scores),
    )


def play(
    family: TaskFamily,
    budget: str,
    examples: list[Example],
    model: Any,
    tokenizer: Any,
    batch_size: int = 64,
    on_progress: Any = None,
    share_prefix: bool = True,
) -> list[Any]:
    """Greedy-play ``examples`` as the hidden eval does: its system prompt, tools, turn and token caps."""
    from metatrain.training.rollout import run_rollouts

    spec = family.task_spec(budget)
    return run_rollouts(
        model,
        tokenizer,
        [eval_conversation(spec, ex) for ex in examples],
        [{fn.__name__: fn for fn in family.tools_for(ex)} for ex in examples],
        tool_schemas(spec),
        max_turns=spec.eval.max_turns,
        max_tokens=spec.eval.max_tokens,
        batch_size=batch_size,
        on_batch=on_progress,
        final_answer_turn=spec.eval.final_answer_turn,
        share_prefix=share_prefix,
    )


def evaluate(
    family: TaskFamily,
    budget: str,
    model_dir: Path,
    device: str = "cpu",
    batch_size: int = 64,
    limit: int | None = None,
    on_progress: Any = None,
) -> EvalReport:
    """Greedy-decode the hidden eval and score it with the family's scorer."""
    t0 = time.monotonic()
    examples = family.hidden_eval(budget)[:limit] if limit else family.hidden_eval(budget)
    model, tokenizer = load_model(model_dir, device, eval_dtype(budget, device))
    rollouts = play(family, budget, examples, model, tokenizer, batch_size, on_progress)
    return score_rollouts(family, examples, rollouts, t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score a model on a family's hidden eval")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--family", required=True)
    parser.add_argument("--budget", default="fast")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    from metatrain.plugins import load_plugins

    family = load_plugins().task_family(args.family)
    done = 0

    def progress(k: int) -> None:
        nonlocal done
        done += k
        print(json.dumps({"event": "eval_batch", "done": done}), flush=True)

    report = evaluate(family, args.budget, args.model, args.device, args.batch_size, on_progress=progress)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.to_json()))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
