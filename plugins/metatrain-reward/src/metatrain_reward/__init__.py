"""The ``default`` reward scheme.

With weights ``w = (0.35, 0.60, 0.05)``::

    total      = w_v * validation + w_q * job_quality + w_s * train_speed
    validation = decay ** (attempts - 1)   if the job validated, else 0
    job_quality = 0.25 * post + 0.75 * uplift_term   if the job succeeded, else 0
    uplift      = post - best_pre
    uplift_term = clip(uplift / uplift_scale, -1, 1)
    train_speed = clip(1 - train_seconds / speed_budget[budget], 0, 1)   only if the job succeeded

An episode whose agent never made a parseable submission scores ``no_submission_reward`` (-0.1)
overall, with every component 0. ``best_pre`` is the best untrained allowed model's frozen
baseline on the same hidden eval. No sentinel values enter the reward: a missing post score
is None in the breakdown, never -1.

Bounds: total lies in ``[min(-0.1, -w_q * 0.75), 1]``.
"""

from __future__ import annotations

import attrs

from metatrain.hookspecs import Register, hookimpl
from metatrain.protocols import RewardInputs
from metatrain.specs import RewardBreakdown
from metatrain.specs.reward import Outcome


def _clip(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


@attrs.frozen
class DefaultReward:
    """0.35 validation / 0.60 job quality / 0.05 train speed (see module docstring)."""

    name: str = "default"
    w_validation: float = 0.35
    w_quality: float = 0.60
    w_speed: float = 0.05
    decay: float = attrs.field(
        default=0.75, validator=attrs.validators.and_(attrs.validators.gt(0.0), attrs.validators.le(1.0))
    )
    uplift_scale: float = attrs.field(default=0.2, validator=attrs.validators.gt(0.0))
    post_weight: float = 0.25
    no_submission_reward: float = -0.1
    speed_budget: dict[str, float] = attrs.field(factory=lambda: {"fast": 900.0, "full": 3600.0})

    @property
    def weights(self) -> dict[str, float]:
        return {"validation": self.w_validation, "job_quality": self.w_quality, "train_speed": self.w_speed}

    def compute(self, inputs: RewardInputs) -> RewardBreakdown:
        if not inputs.any_parseable:
            return RewardBreakdown(
                total=self.no_submission_reward,
                validation=0.0,
                job_quality=0.0,
                train_speed=0.0,
                weights=self.weights,
                outcome="no_submission",
                attempts=inputs.attempts,
                best_pre=inputs.best_pre,
            )
        if not inputs.valid:
            return RewardBreakdown(
                total=0.0,
                validation=0.0,
                job_quality=0.0,
                train_speed=0.0,
                weights=self.weights,
                outcome="never_valid",
                attempts=inputs.attempts,
                best_pre=inputs.best_pre,
            )
        validation = self.decay ** max(0, inputs.attempts - 1)
        quality = speed = 0.0
        uplift = uplift_term = None
        succeeded = inputs.job_status == "succeeded" and inputs.post is not None
        if succeeded:
            assert inputs.post is not None
            if inputs.best_pre is None:
                raise ValueError("best_pre is required to reward a succeeded job (frozen baselines missing)")
            uplift = inputs.post - inputs.best_pre
            uplift_term = _clip(uplift / self.uplift_scale, -1.0, 1.0)
            quality = self.post_weight * inputs.post + (1 - self.post_weight) * uplift_term
            budget_s = self.speed_budget.get(inputs.budget, max(self.speed_budget.values()))
            speed = _clip(1.0 - inputs.train_seconds / budget_s, 0.0, 1.0)
        outcome: Outcome = (
            "succeeded" if succeeded else ("job_failed" if inputs.job_status == "failed" else "job_died")
        )
        total = self.w_validation * validation + self.w_quality * quality + self.w_speed * speed
        return RewardBreakdown(
            total=total,
            validation=validation,
            job_quality=quality,
            train_speed=speed,
            weights=self.weights,
            outcome=outcome,
            attempts=inputs.attempts,
            best_pre=inputs.best_pre,
            post=inputs.post,
            uplift=uplift,
            uplift_term=uplift_term,
        )


@hookimpl
def register_reward_schemes(register: Register) -> None:
    register(DefaultReward())
