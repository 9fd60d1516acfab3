"""The update gate: a GRPO step whose advantages are all zero leaves the weights as they were."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from metatrain.training.update_gate import UpdateGate, gate_updates_on_signal, groups_with_signal, has_signal


def test_signal_is_any_nonzero_advantage_and_unknown_counts_as_signal() -> None:
    assert not has_signal({"advantages": torch.zeros(8)})
    assert has_signal({"advantages": torch.tensor([0.0, 0.0, -0.7, 0.7])})
    assert has_signal({"input_ids": torch.ones(2)})  # nothing to read: never skip
    assert has_signal(None)


def _adamw_after_a_real_step() -> tuple[torch.nn.Parameter, torch.optim.AdamW]:
    param = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.AdamW([param], lr=0.1, weight_decay=0.0)
    param.grad = torch.tensor([1.0, -1.0, 0.5, 0.0])
    opt.step()
    return param, opt


def test_adamw_moves_weights_on_a_zero_gradient_which_is_what_the_gate_prevents() -> None:
    param, opt = _adamw_after_a_real_step()
    before = param.detach().clone()
    param.grad = torch.zeros(4)
    opt.step()  # ungated: momentum alone moves the weights
    assert not torch.equal(param.detach(), before)

    param, opt = _adamw_after_a_real_step()
    gate, step_no = UpdateGate(), iter(range(2, 10))
    gate.gate(opt, lambda: next(step_no))
    before = param.detach().clone()
    gate.see({"advantages": torch.zeros(4)})
    gate.see({"advantages": torch.zeros(4)})  # every micro-batch of the step without signal
    param.grad = torch.zeros(4)
    opt.step()
    assert torch.equal(param.detach(), before) and gate.skipped_steps == [2]
    assert gate.skipped(2) and not gate.skipped(3)

    gate.see({"advantages": torch.zeros(4)})
    gate.see({"advantages": torch.tensor([0.0, 0.5, -0.5, 0.0])})  # one micro-batch with signal
    param.grad = torch.tensor([0.0, 1.0, 0.0, 0.0])
    opt.step()
    assert not torch.equal(param.detach(), before) and gate.skipped_steps == [2]
    assert gate.signal is False  # each update starts the next step afresh


class _Trainer:
    """The parts of a TRL GRPOTrainer the gate touches."""

    def __init__(self, advantages: list[torch.Tensor]) -> None:
        self.batches = iter(advantages)
        self.callbacks: list[Any] = []
        self.state = type("State", (), {"global_step": 0})()
        self.param = torch.nn.Parameter(torch.ones(2))
        self.optimizer = torch.optim.AdamW([self.param], lr=0.1)

    def _prepare_inputs(self, batch: Any) -> dict[str, torch.Tensor]:
        return {"advantages": next(self.batches)}

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)


@pytest.mark.parametrize(
    ("advantages", "skipped"),
    [([torch.zeros(2), torch.zeros(2)], [1, 2]), ([torch.ones(2), torch.zeros(2)], [2])],
)
def test_the_installed_gate_reads_prepared_batches_and_gates_the_trainers_optimizer(
    advantages: list[torch.Tensor], skipped: list[int]
) -> None:
    trainer = _Trainer(advantages)
    gate = gate_updates_on_signal(trainer)
    for callback in trainer.callbacks:
        callback.on_train_begin(None, trainer.state, None)
    for _ in advantages:
        trainer._prepare_inputs(None)
        trainer.param.grad = torch.ones(2)
        trainer.optimizer.step()
        trainer.state.global_step += 1
    assert gate.skipped_steps == skipped


def _trl_batch_scaled(rewards: list[list[float]]) -> list[float]:
    """Advantages as TRL 1.16 computes them under ``scale_rewards="batch"``: reward minus its
    group's mean, over the whole batch's standard deviation."""
    flat = torch.tensor(rewards)
    centred = flat - flat.mean(dim=1, keepdim=True)
    return (centred / (flat.flatten().std() + 1e-4)).flatten().tolist()


def test_groups_with_signal_counts_groups_whatever_the_scaling() -> None:
    rewards = [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2], [1.0, 0.0, 0.0, 0.0]]
    advantages = _trl_batch_scaled(rewards)
    assert any(a != 0 for a in advantages)  # TRL's batch-level flag: "the batch has spread"
    assert groups_with_signal(advantages, 4) == 0.5  # two of four groups can teach anything
    assert groups_with_signal([0.0] * 8, 4) == 0.0
    assert groups_with_signal([0.0, 0.0, 0.5, -0.5], 2) == 0.5
    assert groups_with_signal([0.1] * 6, 4) is None  # not whole groups: unknown, not a guess
    assert groups_with_signal([], 4) is None


def test_metrics_rows_carry_the_share_of_groups_with_signal(tmp_path: Any) -> None:
    import json

    from metatrain.training.trl_backend import _MetricsWriter

    writer = _MetricsWriter(tmp_path / "metrics.jsonl", max_steps=3)
    writer.write(1, {"loss": 0.0})
    shares = iter([0.25, None])
    writer.group_signal = lambda: next(shares)
    writer.write(2, {"loss": 0.1})
    writer.write(3, {"loss": 0.2})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("groups_with_signal") for r in rows] == [None, 0.25, None]
