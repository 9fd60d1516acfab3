"""Uplift of finished episodes over the best untrained model, with a 95% interval, as a table.

``python -m metatrain.analysis.uplift runs/*/result.json`` prints the markdown table that
docs/families.md carries (one row per finished run directory); a run whose job did not finish is
named with its error on stderr and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
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


@attrs.frozen
class UpliftRow:
    """One episode's job against the frozen baselines of its family and budget."""

    family: str
    version: str
    budget: str
    model: str
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
    return UpliftRow(
        family=result.family,
        version=result.family_version,
        budget=result.budget,
        model=result.model,
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
    )


def markdown_table(rows: Sequence[UpliftRow]) -> str:
    head = (
        "| family | version | budget | model | best_pre (model) | pre | post | uplift | 95% interval "
        "| n | train s | steps | device |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.family} | {r.version} | {r.budget} | {r.model} | {r.best_pre:.3f} ({r.best_pre_model}) "
        f"| {r.pre:.3f} | {r.post:.3f} | {r.uplift:+.3f} | [{r.ci95[0]:+.3f}, {r.ci95[1]:+.3f}]"
        f"{' ✓' if r.significant else ''} | {r.eval_n} | {r.train_seconds:.0f} "
        f"| {r.train_steps}{' (wall)' if r.stopped_at_deadline else ''} | {r.device} |\n"
        for r in rows
    )
    return head + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="episode run directories (or their result.json)")
    args = parser.parse_args(argv)
    rows: list[UpliftRow] = []
    left_out: list[str] = []
    for path in args.runs:
        try:
            rows.append(uplift_row(path.parent if path.name == "result.json" else path))
        except UpliftError as exc:
            left_out.append(str(exc))
    if not rows:
        parser.exit(2, "".join(f"error: {e}\n" for e in left_out))
    print(markdown_table(rows), end="")
    for reason in left_out:
        print(f"left out: {reason}", file=sys.stderr)
    return 1 if left_out else 0


if __name__ == "__main__":
    raise SystemExit(main())
