"""The uplift table: Newcombe's interval, rows read from run directories, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_dirs import write_run_dir as _run_dir

from metatrain.analysis.uplift import (
    UpliftError,
    difference_interval,
    main,
    markdown_table,
    uplift_row,
)
from metatrain.training.evaluation import interval95


def test_difference_interval_by_hand() -> None:
    lo, hi = difference_interval(0.5, (0.3, 0.7), 0.2, (0.1, 0.35))
    # d = 0.3; lower: sqrt(0.2^2 + 0.15^2) = 0.25; upper: sqrt(0.2^2 + 0.1^2) = 0.2236...
    assert lo == pytest.approx(0.05)
    assert hi == pytest.approx(0.3 + 0.05**0.5)


def test_difference_interval_from_wilson_intervals() -> None:
    none = [0.0] * 48
    lo, hi = difference_interval(0.0, interval95(none), 0.0, interval95(none))
    assert lo < 0 < hi
    post = [1.0] * 30 + [0.0] * 18  # 0.625 against 0.0 of 48: clearly better
    lo, hi = difference_interval(0.625, interval95(post), 0.0, interval95(none))
    assert 0.3 < lo < 0.625 < hi < 0.8


def test_row_compares_post_with_the_best_untrained_model(tmp_path: Path) -> None:
    row = uplift_row(_run_dir(tmp_path))
    assert (row.best_pre_model, row.best_pre, row.pre, row.post) == ("gemma3-270m", 0.2, 0.1, 0.5)
    assert row.uplift == pytest.approx(0.3)
    assert row.ci95 == pytest.approx((0.05, 0.3 + 0.05**0.5))
    assert row.significant
    table = markdown_table([row])
    assert "| ledger | 1.0.0 | fast | smollm2-135m | `reference` | 0.200 (gemma3-270m) |" in table
    assert "[+0.050, +0.524] ✓ | 48 | 61 | 7 (wall) | cpu |" in table
    assert not row.diverged


def test_a_run_stopped_on_a_nan_still_has_its_row_marked(tmp_path: Path) -> None:
    """Training stopped before a broken update keeps its last finite weights, which the post-eval
    scored: the row stands, and says how training ended."""
    row = uplift_row(_run_dir(tmp_path, diverged="training diverged: ... stopped before the update"))
    assert row.diverged and row.post == 0.5
    assert "| 7 (wall) (NaN stop) | cpu |" in markdown_table([row])


def test_rows_name_the_ablation_they_ran(tmp_path: Path) -> None:
    """Ablations of one family side by side are told apart by their ``--agent``."""
    agent = "reference:train.advantage_scale=batch,env_args.min_hops=2"
    rows = [uplift_row(_run_dir(tmp_path, name=n, agent=a)) for n, a in (("a", "reference"), ("b", agent))]
    assert [r.agent for r in rows] == ["reference", agent]
    assert f"| smollm2-135m | `{agent}` | 0.200" in markdown_table(rows)


def test_command_with_agent_counts_only_that_agents_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ablation = "reference:train.lr=1e-4"
    run = _run_dir(tmp_path, agent=ablation)
    assert main(["--agent", ablation, str(run / "result.json")]) == 0
    with pytest.raises(SystemExit) as stop:
        main(["--agent", "reference", str(run)])
    assert stop.value.code == 2
    assert f"ran --agent {ablation!r}, not 'reference'" in capsys.readouterr().err


def test_row_not_significant_when_the_interval_holds_zero(tmp_path: Path) -> None:
    row = uplift_row(_run_dir(tmp_path, post=0.25))
    assert row.ci95[0] < 0 < row.ci95[1] and not row.significant
    assert "✓" not in markdown_table([row])


def test_unfinished_or_missing_runs_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UpliftError, match="did not finish \\(failed: training diverged\\)"):
        uplift_row(_run_dir(tmp_path, post=None, status="failed", error="training diverged\n  File x"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UpliftError, match="not a finished episode"):
        uplift_row(empty)
    with pytest.raises(SystemExit) as exc:
        main([str(empty)])
    assert exc.value.code == 2 and "result.json" in capsys.readouterr().err


def test_command_prints_one_row_per_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(_run_dir(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and "| ledger |" in out


def test_command_names_unfinished_runs_and_keeps_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = _run_dir(tmp_path)
    failed = _run_dir(tmp_path, post=None, status="failed", error="training diverged: nan", name="run-2")
    assert main([str(done / "result.json"), str(failed / "result.json")]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("| ledger |") == 1
    assert "left out:" in captured.err and "run-2" in captured.err
    assert "training diverged: nan" in captured.err


def _pairs(both: int, gained: int, lost: int, neither: int) -> tuple[list[float], list[float]]:
    """(post, pre) 0/1 scores of the same examples from the paired 2x2 table."""
    post = [1.0] * both + [1.0] * gained + [0.0] * lost + [0.0] * neither
    pre = [1.0] * both + [0.0] * gained + [1.0] * lost + [0.0] * neither
    return post, pre


def test_paired_interval_without_correlation_is_the_unpaired_one() -> None:
    from metatrain.analysis.uplift import paired_interval

    post, pre = _pairs(both=1, gained=9, lost=3, neither=37)  # ad - bc = 10 <= n/2: phi taken as 0
    unpaired = difference_interval(0.2, interval95(post), 0.08, interval95(pre))
    assert paired_interval(post, pre) == pytest.approx(unpaired)


def test_paired_interval_narrows_with_correlation_and_is_antisymmetric() -> None:
    from metatrain.analysis.uplift import paired_interval

    post, pre = _pairs(both=15, gained=12, lost=1, neither=172)  # training kept almost every pre success
    lo, hi = paired_interval(post, pre)
    ulo, uhi = difference_interval(27 / 200, interval95(post), 16 / 200, interval95(pre))
    assert ulo < 0 < lo < 11 / 200 < hi < uhi  # the same examples, so the interval clears zero
    assert paired_interval(pre, post) == pytest.approx((-hi, -lo))
    assert paired_interval(*_pairs(0, 0, 0, 50)) == pytest.approx((0.0, 0.0), abs=0.08)
    with pytest.raises(ValueError, match="same examples"):
        paired_interval([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="0/1"):
        paired_interval([0.5], [1.0])


def test_mcnemar_exact_p_by_hand() -> None:
    from metatrain.analysis.uplift import mcnemar_p

    assert mcnemar_p(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_p(3, 1) == pytest.approx(2 * 5 / 16)
    assert mcnemar_p(1, 3) == mcnemar_p(3, 1)
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_row_pairs_post_with_the_jobs_own_pre_eval(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    post, pre = _pairs(both=2, gained=22, lost=1, neither=23)
    result = run / "job" / "result"
    (result / "pre_eval.json").write_text(json.dumps({"score": sum(pre) / 48, "scores": pre}))
    assert uplift_row(run).paired is None  # no post scores: no paired column
    (result / "post_eval.json").write_text(json.dumps({"score": sum(post) / 48, "scores": post}))
    row = uplift_row(run)
    assert row.paired is not None and (row.paired.gained, row.paired.lost) == (22, 1)
    assert row.paired.p_value < 1e-4 and row.paired.ci95[0] > 0
    assert "22 gained / 1 lost, p=5.72e-06 |" in markdown_table([row])
    assert markdown_table([uplift_row(_run_dir(tmp_path, name="bare"))]).rstrip().endswith("| cpu | — |")
