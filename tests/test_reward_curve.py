"""The outer reward curve: t quantiles, the trend and its interval, the plot and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metatrain.analysis.reward_curve import (
    holdout_points,
    linear_trend,
    main,
    reward_points,
    t_quantile_975,
)


@pytest.mark.parametrize(
    ("df", "t"), [(1, 12.706), (3, 3.182), (6, 2.447), (10, 2.228), (30, 2.042), (1000, 1.962)]
)
def test_t_quantiles_match_the_tables(df: int, t: float) -> None:
    assert t_quantile_975(df) == pytest.approx(t, abs=0.005)


def test_trend_by_hand() -> None:
    # y = 1 + 2x exactly: slope 2 with a zero-width interval.
    exact = linear_trend([0, 1, 2, 3], [1, 3, 5, 7])
    assert (exact.slope, exact.intercept, *exact.ci95) == pytest.approx((2.0, 1.0, 2.0, 2.0))
    # x = 0..4, y = 0, 1, 1, 2, 4: slope 0.9, intercept -0.2, residual SS 1.1, sxx 10, df 3.
    t = linear_trend([0, 1, 2, 3, 4], [0, 1, 1, 2, 4])
    half = t_quantile_975(3) * (1.1 / 3 / 10) ** 0.5
    assert t.slope == pytest.approx(0.9) and t.intercept == pytest.approx(-0.2)
    assert t.ci95 == pytest.approx((0.9 - half, 0.9 + half)) and t.rising
    flat = linear_trend([0, 1, 2, 3, 4, 5], [0.1, -0.1, 0.1, -0.1, 0.1, -0.1])
    assert flat.ci95[0] < 0 < flat.ci95[1] and not flat.rising
    with pytest.raises(ValueError, match="at least three"):
        linear_trend([0, 1], [0, 1])


def _log_dir(tmp_path: Path, rewards: list[float]) -> Path:
    rows = [{"step": i, "env/all/reward/total": r, "env/all/valid": 0.5} for i, r in enumerate(rewards)]
    rows.insert(2, {"step": 0, "test/env/all/reward/total": 0.05})  # a holdout-only line
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_points_split_training_and_holdout_lines(tmp_path: Path) -> None:
    log = _log_dir(tmp_path, [0.0, 0.1, 0.2])
    assert reward_points(log) == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert holdout_points(log) == [(0, 0.05)]


def test_command_prints_the_trend_and_writes_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log_dir(tmp_path, [0.0, 0.05, 0.15, 0.2, 0.3, 0.32, 0.4, 0.5, 0.55, 0.63])
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "10 steps; reward +0.025 (first 2) -> +0.590 (last 2)" in out and "rising" in out
    png = log / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_command_refuses_a_run_without_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2 and "has 0 training steps" in capsys.readouterr().err
