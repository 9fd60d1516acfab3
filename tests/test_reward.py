"""The default reward: exact formulas on hand-computed cases, and hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metatrain.protocols import RewardInputs
from metatrain_reward import DefaultReward

R = DefaultReward()
score = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
attempts = st.integers(min_value=1, max_value=10)
seconds = st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False)


def inputs(**kw: object) -> RewardInputs:
    base: dict[str, object] = dict(
        any_parseable=True,
        attempts=1,
        valid=True,
        job_status="succeeded",
        post=0.5,
        best_pre=0.3,
        train_seconds=90.0,
        budget="fast",
    )
    base.update(kw)
    return RewardInputs(**base)  # type: ignore[arg-type]


def test_hand_computed_success() -> None:
    r = R.compute(inputs(attempts=2, post=0.5, best_pre=0.3, train_seconds=90.0))
    assert r.validation == pytest.approx(0.75)
    assert r.uplift == pytest.approx(0.2)
    assert r.uplift_term == pytest.approx(1.0)
    assert r.job_quality == pytest.approx(0.25 * 0.5 + 0.75 * 1.0)
    assert r.train_speed == pytest.approx(1 - 90 / 900)
    assert r.total == pytest.approx(0.35 * 0.75 + 0.60 * 0.875 + 0.05 * 0.9)
    assert r.outcome == "succeeded"


def test_negative_uplift_is_signed() -> None:
    r = R.compute(inputs(post=0.2, best_pre=0.3))
    assert r.uplift_term == pytest.approx(-0.5)
    assert r.job_quality == pytest.approx(0.25 * 0.2 - 0.75 * 0.5)


def test_no_submission_is_minus_point_one() -> None:
    r = R.compute(inputs(any_parseable=False, valid=False, job_status=None, post=None))
    assert (r.total, r.outcome) == (-0.1, "no_submission")


def test_never_valid_scores_zero() -> None:
    r = R.compute(inputs(valid=False, attempts=3, job_status=None, post=None))
    assert r.total == 0.0 and r.outcome == "never_valid"


def test_dead_job_keeps_validation_term_only() -> None:
    r = R.compute(inputs(job_status="died", post=None))
    assert r.job_quality == 0.0 and r.train_speed == 0.0
    assert r.total == pytest.approx(0.35)
    assert r.outcome == "job_died"


def test_missing_baseline_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="best_pre"):
        R.compute(inputs(best_pre=None))


def test_configurable_terms() -> None:
    r = DefaultReward(decay=0.5, uplift_scale=0.1).compute(inputs(attempts=3, post=0.35, best_pre=0.3))
    assert r.validation == pytest.approx(0.25)
    assert r.uplift_term == pytest.approx(0.5)


@given(post=score, best=score, a=attempts, s=seconds)
def test_bounds(post: float, best: float, a: int, s: float) -> None:
    r = R.compute(inputs(post=post, best_pre=best, attempts=a, train_seconds=s))
    assert -0.6 * 0.75 - 1e-9 <= r.total <= 1.0 + 1e-9
    assert 0 <= r.validation <= 1 and 0 <= r.train_speed <= 1 and -0.75 <= r.job_quality <= 1
    assert math.isfinite(r.total)


@given(p1=score, p2=score, best=score)
def test_monotone_in_post(p1: float, p2: float, best: float) -> None:
    lo, hi = sorted((p1, p2))
    assert (
        R.compute(inputs(post=lo, best_pre=best)).total
        <= R.compute(inputs(post=hi, best_pre=best)).total + 1e-12
    )


@given(a1=attempts, a2=attempts, post=score, best=score)
def test_fewer_attempts_never_worse(a1: int, a2: int, post: float, best: float) -> None:
    lo, hi = sorted((a1, a2))
    assert (
        R.compute(inputs(attempts=lo, post=post, best_pre=best)).total
        >= R.compute(inputs(attempts=hi, post=post, best_pre=best)).total - 1e-12
    )


@given(s1=seconds, s2=seconds)
def test_faster_never_worse(s1: float, s2: float) -> None:
    lo, hi = sorted((s1, s2))
    assert R.compute(inputs(train_seconds=lo)).total >= R.compute(inputs(train_seconds=hi)).total - 1e-12


@given(post=score, best=score, a=attempts)
def test_any_validated_job_beats_never_valid_unless_quality_negative(
    post: float, best: float, a: int
) -> None:
    ok = R.compute(inputs(post=post, best_pre=best, attempts=a))
    never = R.compute(inputs(valid=False, attempts=a, job_status=None, post=None))
    if ok.job_quality >= 0:
        assert ok.total > never.total
