"""The training plot: the mean reward and each rubric function's own curve."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd

from metatrain.analysis.runs import plot_training, reward_parts, skipped_steps


def test_each_rubric_function_gets_its_own_curve() -> None:
    metrics = pd.DataFrame(
        {
            "step": [1, 2, 3],
            "reward": [0.02, 0.10, 0.20],
            "reward_std": [0.05, 0.1, 0.1],
            "rewards/correct_answer/mean": [0.0, 0.0, 0.01],
            "rewards/hop_progress/mean": [0.1, 0.5, 0.99],
            "rewards/hop_progress/std": [0.1, 0.2, 0.05],
        }
    )
    assert reward_parts(metrics) == ["correct_answer", "hop_progress"]
    ax = plot_training(metrics)
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["hop_progress"] == [0.1, 0.5, 0.99] and lines["correct_answer"] == [0.0, 0.0, 0.01]
    assert lines["mean reward"] == [0.02, 0.10, 0.20]


def test_no_metrics_says_so() -> None:
    ax = plot_training(pd.DataFrame())
    assert [t.get_text() for t in ax.texts] == ["no training metrics"]


def test_steps_without_an_update_are_shaded() -> None:
    metrics = pd.DataFrame(
        {
            "step": [1, 2, 3, 4],
            "reward": [0.0, 0.0, 0.1, 0.0],
            "update_skipped": [True, True, False, True],
            "groups_with_signal": [0.0, 0.0, 0.25, 0.0],
        }
    )
    assert skipped_steps(metrics) == [1, 2, 4]
    ax = plot_training(metrics)
    shaded = sorted(round(p.get_x() + p.get_width() / 2) for p in ax.patches)  # one span per step
    assert shaded == [1, 2, 4] and all(p.get_width() == 1.0 for p in ax.patches)
    assert "no update" in ax.get_legend_handles_labels()[1]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["groups with signal"] == [0.0, 0.0, 0.25, 0.0]
    assert skipped_steps(metrics.drop(columns="update_skipped")) == []  # runs from before the gate
