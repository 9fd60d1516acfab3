"""Skip the optimizer update of a GRPO step whose advantages are all zero.

When every group of a step has equal rewards, GRPO's loss and its gradient are exactly zero (the
jobs run without a KL term), yet AdamW still moves the weights by the momentum of earlier steps.
Why it matters: on one H100 (2026-12-05) a multi_hop job had reward variance in one group of
sixteen in each of its first two steps and in none of the next six; over those six its tool calls
per rollout rose from 5.1 to 7.5 and its hidden eval fell from 0.045 to 0.000 (docs/families.md).
A skipped step still counts as a step (the schedule, the deadline and the logs go on); its
``metrics.jsonl`` row says ``update_skipped``. TRL only: prime-rl v0.6.0 already drops
zero-advantage rollouts from its batches by default (``orchestrator.post_batch_filters``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs


def has_signal(inputs: Any) -> bool:
    """Whether a prepared micro-batch holds a non-zero advantage (one without advantages counts as
    signal: the gate never skips what it cannot read)."""
    advantages = inputs.get("advantages") if isinstance(inputs, Mapping) else None
    if advantages is None:
        return True
    return bool((advantages != 0).any())


def groups_with_signal(advantages: Sequence[float], group_size: int) -> float | None:
    """The share of prompt groups (``group_size`` consecutive rollouts) holding a non-zero advantage.

    A group whose rollouts all earned the same reward has none under any advantage scaling. TRL's
    own ``frac_reward_zero_std`` cannot say this under ``scale_rewards="batch"``: it then reads the
    whole batch's spread (0 at every step with any reward difference; docs/families.md). None when
    the rollouts do not split into whole groups.
    """
    if group_size <= 0 or not advantages or len(advantages) % group_size:
        return None
    starts = range(0, len(advantages), group_size)
    return sum(any(a != 0 for a in advantages[i : i + group_size]) for i in starts) / len(starts)


@attrs.define
class UpdateGate:
    """Tracks whether the micro-batches of the running step carried signal; skips the update if not."""

    signal: bool = False
    skipped_steps: list[int] = attrs.field(factory=list)

    def see(self, inputs: Any) -> None:
        self.signal = self.signal or has_signal(inputs)

    def gate(self, optimizer: Any, next_step: Callable[[], int]) -> None:
        """Wrap ``optimizer.step`` (on the instance): without signal since the last update it is
        skipped and ``next_step()`` (the step being taken, 1-based) is recorded."""
        step = optimizer.step

        def gated(*args: Any, **kwargs: Any) -> Any:
            signal, self.signal = self.signal, False
            if signal:
                return step(*args, **kwargs)
            self.skipped_steps.append(next_step())
            return None

        optimizer.step = gated

    def skipped(self, step: int) -> bool:
        return step in self.skipped_steps


def gate_updates_on_signal(trainer: Any) -> UpdateGate:
    """Install an UpdateGate on a TRL GRPOTrainer: it watches each micro-batch ``_prepare_inputs``
    returns and, from ``on_train_begin`` (the optimizer exists by then), gates ``trainer.optimizer``."""
    from transformers import TrainerCallback

    gate = UpdateGate()
    prepare = trainer._prepare_inputs

    def prepared(batch: Any) -> Any:
        inputs = prepare(batch)
        gate.see(inputs)
        return inputs

    class GateCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            gate.gate(trainer.optimizer, lambda: int(trainer.state.global_step) + 1)

    trainer._prepare_inputs = prepared
    trainer.add_callback(GateCallback())
    return gate
