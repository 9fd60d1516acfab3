"""The outer loop's reward curve: per-step mean episode reward, its linear trend and a plot.

``python -m metatrain.analysis.reward_curve LOG_DIR`` prints the trend (slope per step with its 95%
interval) and writes ``LOG_DIR/reward_curve.png``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

import attrs

from metatrain.outer.metrics import read_jsonl

REWARD = "env/all/reward/total"
HOLDOUT = "test/env/all/reward/total"


def _points(log_dir: Path, key: str) -> list[tuple[int, float]]:
    rows = read_jsonl(log_dir / "metrics.jsonl")
    return [(int(m["step"]), float(m[key])) for m in rows if key in m and "step" in m]


def reward_points(log_dir: Path) -> list[tuple[int, float]]:
    """(step, mean episode reward) of each training step in the cookbook's ``metrics.jsonl``."""
    return _points(log_dir, REWARD)


def holdout_points(log_dir: Path) -> list[tuple[int, float]]:
    """(step, mean reward on the held-out family) of each holdout evaluation."""
    return _points(log_dir, HOLDOUT)


T_975_SMALL_DF = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t: tabled up to df 5, else Cornish-Fisher (within 0.005)."""
    if df in T_975_SMALL_DF:
        return T_975_SMALL_DF[df]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


@attrs.frozen
class Trend:
    """Least-squares line through the per-step rewards."""

    slope: float
    ci95: tuple[float, float]
    intercept: float
    n: int

    @property
    def rising(self) -> bool:
        return self.ci95[0] > 0


def linear_trend(xs: Sequence[float], ys: Sequence[float]) -> Trend:
    """Slope of ``ys`` over ``xs`` with a t interval (needs at least three points)."""
    n = len(xs)
    if n != len(ys) or n < 3:
        raise ValueError(f"a trend needs at least three (step, reward) points, got {n}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all points are at the same step")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    resid = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    half = t_quantile_975(n - 2) * math.sqrt(resid / (n - 2) / sxx)
    return Trend(slope, (slope - half, slope + half), intercept, n)


def plot_reward_curve(log_dir: Path, out: Path) -> Path:
    """Per-step reward, its trend line and the holdout points, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, holdout = reward_points(log_dir), holdout_points(log_dir)
    fig, ax = plt.subplots(figsize=(7, 4))
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, "o-", ms=3, label="mean episode reward")
        if len(points) >= 3:
            trend = linear_trend(xs, ys)
            fit = [trend.intercept + trend.slope * x for x in xs]
            ax.plot(xs, fit, "--", label=f"trend {trend.slope:+.4f}/step")
    if holdout:
        hx, hy = zip(*holdout, strict=True)
        ax.plot(hx, hy, "s", label="held-out family")
    ax.set_xlabel("outer step")
    ax.set_ylabel("episode reward")
    ax.set_title(str(log_dir))
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dir", type=Path)
    parser.add_argument("--out", type=Path, help="PNG path (default: LOG_DIR/reward_curve.png)")
    args = parser.parse_args(argv)
    points = reward_points(args.log_dir)
    if len(points) < 3:
        parser.exit(2, f"error: {args.log_dir / 'metrics.jsonl'} has {len(points)} training steps; need 3\n")
    xs, ys = zip(*points, strict=True)
    trend = linear_trend(xs, ys)
    k = max(1, len(ys) // 5)
    print(
        f"{len(points)} steps; reward {sum(ys[:k]) / k:+.3f} (first {k}) -> "
        f"{sum(ys[-k:]) / k:+.3f} (last {k}); "
        f"slope {trend.slope:+.4f}/step, 95% [{trend.ci95[0]:+.4f}, {trend.ci95[1]:+.4f}]: "
        + ("rising" if trend.rising else "no rise shown")
    )
    print(plot_reward_curve(args.log_dir, args.out or args.log_dir / "reward_curve.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
