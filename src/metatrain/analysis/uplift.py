"""Uplift of finished episodes over the best untrained model, with a 95% interval, as a table.

``python -m metatrain.analysis.uplift runs/*/result.json`` prints the markdown table that
docs/families.md carries (one row per finished run directory); a run whose job did not finish is
named with its error on stderr and makes the exit status 1.

The uplift column compares post with the frozen baseline (two independent estimates). The last
column compares post with the job's own pre-eval example by example (the same model, the same
hidden examples): how many examples training gained and lost, a paired interval, and McNemar's
exact test on those discordant examples.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import attrs

from metatrain.specs import EpisodeResult


def difference_interval(
    p1: float, ci1: Sequence[float], p2: float, ci2: Sequence[float]
) -> tuple[float, float]:
    """95% interval of ``p1 - p2`` for independent estimates from each one's own 95% interval.

    Newcombe's square-and-add method (his method 10 when the inputs are Wilson intervals).
    """
    d = p1 - p2
    lo = d - math.sqrt((p1 - ci1[0]) ** 2 + (ci2[1] - p2) ** 2)
    hi = d + math.sqrt((ci1[1] - p1) ** 2 + (p2 - ci2[0]) ** 2)
    return (lo, hi)


def paired_counts(post: Sequence[float], pre: Sequence[float]) -> tuple[int, int, int, int]:
    """The paired 2x2 table of 0/1 scores of the same examples: (both right, gained, lost, neither);
    a ValueError for lists of different lengths, empty ones, or scores other than 0 and 1."""
    if len(post) != len(pre) or not post:
        raise ValueError(f"paired scores need the same examples, got {len(post)} and {len(pre)}")
    if any(x not in (0.0, 1.0) for x in (*post, *pre)):
        raise ValueError("paired scores must be 0/1")
    pairs = Counter(zip(post, pre, strict=True))
    return (pairs[1.0, 1.0], pairs[1.0, 0.0], pairs[0.0, 1.0], pairs[0.0, 0.0])


def paired_interval(post: Sequence[float], pre: Sequence[float]) -> tuple[float, float]:
    """95% interval of ``mean(post) - mean(pre)`` for 0/1 scores of the same examples.

    Newcombe's square-and-add method for paired proportions (his method 10): each rate's Wilson
    interval, combined through the 2x2 table's phi, whose numerator ``ad - bc`` is continuity
    corrected (less n/2 when above it, 0 between 0 and n/2; phi is 0 when a margin is empty).
    """
    from metatrain.training.evaluation import interval95

    a, b, c, d = paired_counts(post, pre)
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = interval95(list(post))
    l2, u2 = interval95(list(pre))
    denom = math.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    cross = a * d - b * c
    corrected = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = corrected / denom if denom else 0.0
    lo = (p1 - p2) - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = (p1 - p2) + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return (lo, hi)


def mcnemar_p(gained: int, lost: int) -> float:
    """Exact two-sided McNemar p-value: ``gained`` and ``lost`` are the discordant examples."""
    m = gained + lost
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(gained, lost) + 1)) / 2**m
    return min(1.0, 2 * tail)


@attrs.frozen
class PairedChange:
    """Post against the job's own pre-eval, example by example."""

    gained: int
    lost: int
    ci95: tuple[float, float]
    p_value: float

    @classmethod
    def of(cls, post: Sequence[float], pre: Sequence[float]) -> PairedChange:
        """Raises ValueError as ``paired_counts`` does."""
        _, gained, lost, _ = paired_counts(post, pre)
        return cls(gained, lost, paired_interval(post, pre), mcnemar_p(gained, lost))


def _eval_scores(path: Path) -> list[float] | None:
    try:
        scores = json.loads(path.read_text()).get("scores")
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return [float(x) for x in scores] if isinstance(scores, list) else None


@attrs.frozen
class UpliftRow:
    """One episode's job against the frozen baselines of its family and budget."""

    family: str
    version: str
    budget: str
    model: str
    agent: str
    """The episode's ``--agent``, ablation included (``reference:train.advantage_scale=batch``)."""
    best_pre_model: str
    best_pre: float
    pre: float
    post: float
    uplift: float
    ci95: tuple[float, float]
    eval_n: int
    train_seconds: float
    train_steps: int
    stopped_at_deadline: bool
    device: str
    run_id: str
    diverged: bool = False
    """Training stopped on a non-finite gradient before an update; post scores the last finite step."""
    paired: PairedChange | None = None
    """Post against pre on the same examples, when both evals kept their per-example scores."""

    @property
    def significant(self) -> bool:
        """The interval excludes zero on the side of improvement."""
        return self.ci95[0] > 0


class UpliftError(ValueError):
    """A run directory cannot give an uplift row (unfinished job, missing files)."""


def uplift_row(run_dir: Path) -> UpliftRow:
    """Read ``result.json``, ``manifest.json`` and the job's ``result.json`` of one episode."""
    try:
        result = EpisodeResult.model_validate_json((run_dir / "result.json").read_text())
        manifest = json.loads((run_dir / "manifest.json").read_text())
        job = json.loads((run_dir / "job" / "result" / "result.json").read_text())
    except FileNotFoundError as exc:
        raise UpliftError(f"{run_dir}: not a finished episode ({exc.filename} is missing)") from exc
    summary = result.job
    if summary.post_score is None or summary.pre_score is None or result.model is None:
        why = summary.status + (f": {summary.error.splitlines()[0]}" if summary.error else "")
        raise UpliftError(f"{run_dir}: the job did not finish ({why})")
    if summary.best_pre is None:
        raise UpliftError(f"{run_dir}: the result has no best_pre")
    # The file may hold models the budget does not allow; best_pre is over the allowed ones.
    models = manifest["baselines"]["models"]
    best_model = next(m for m in sorted(models) if models[m]["score"] == summary.best_pre)
    best = models[best_model]
    post_ci = job["train_metrics"]["post_ci95"]
    pre_scores = _eval_scores(run_dir / "job" / "result" / "pre_eval.json")
    post_scores = _eval_scores(run_dir / "job" / "result" / "post_eval.json")
    try:  # both evals' per-example 0/1 scores of the same examples, or no paired column
        paired = PairedChange.of(post_scores or [], pre_scores or [])
    except ValueError:
        paired = None
    return UpliftRow(
        family=result.family,
        version=result.family_version,
        budget=result.budget,
        model=result.model,
        agent=result.agent,
        best_pre_model=best_model,
        best_pre=best["score"],
        pre=summary.pre_score,
        post=summary.post_score,
        uplift=summary.post_score - best["score"],
        ci95=difference_interval(summary.post_score, post_ci, best["score"], best["ci95"]),
        eval_n=summary.eval_n,
        train_seconds=summary.train_seconds,
        train_steps=summary.train_steps,
        stopped_at_deadline=summary.stopped_at_deadline,
        device=job["device"],
        run_id=result.run_id,
        paired=paired,
        diverged=summary.diverged is not None,
    )


def paired_cell(change: PairedChange | None, post: float, pre: float) -> str:
    """``+0.065 [+0.012, +0.118], 17 gained / 4 lost, p=0.007`` (or a dash without scores)."""
    if change is None:
        return "—"
    lo, hi = change.ci95
    return (
        f"{post - pre:+.3f} [{lo:+.3f}, {hi:+.3f}], {change.gained} gained / {change.lost} lost, "
        f"p={change.p_value:.3g}"
    )


def markdown_table(rows: Sequence[UpliftRow]) -> str:
    head = (
        "| family | version | budget | model | agent | best_pre (model) | pre | post | uplift | 95% interval "
        "| n | train s | steps | device | post − pre, paired (McNemar) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.family} | {r.version} | {r.budget} | {r.model} | `{r.agent.replace('|', '/')}` "
        f"| {r.best_pre:.3f} ({r.best_pre_model}) "
        f"| {r.pre:.3f} | {r.post:.3f} | {r.uplift:+.3f} | [{r.ci95[0]:+.3f}, {r.ci95[1]:+.3f}]"
        f"{' ✓' if r.significant else ''} | {r.eval_n} | {r.train_seconds:.0f} "
        f"| {r.train_steps}{' (wall)' if r.stopped_at_deadline else ''}{' (NaN stop)' if r.diverged else ''} "
        f"| {r.device} "
        f"| {paired_cell(r.paired, r.post, r.pre)} |\n"
        for r in rows
    )
    return head + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="episode run directories (or their result.json)")
    parser.add_argument(
        "--agent", help="only runs of this --agent count; others are left out (a study's resume check)"
    )
    args = parser.parse_args(argv)
    rows: list[UpliftRow] = []
    left_out: list[str] = []
    for path in args.runs:
        try:
            row = uplift_row(path.parent if path.name == "result.json" else path)
        except UpliftError as exc:
            left_out.append(str(exc))
            continue
        if args.agent is not None and row.agent != args.agent:
            left_out.append(f"{path}: ran --agent {row.agent!r}, not {args.agent!r}")
        else:
            rows.append(row)
    if not rows:
        parser.exit(2, "".join(f"error: {e}\n" for e in left_out))
    print(markdown_table(rows), end="")
    for reason in left_out:
        print(f"left out: {reason}", file=sys.stderr)
    return 1 if left_out else 0


if __name__ == "__main__":
    raise SystemExit(main())
