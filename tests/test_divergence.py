"""The divergence guard drops a micro-batch that made a gradient non-finite, describes it, and stops
when that keeps happening."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from metatrain.training.divergence import (
    DroppedMicroBatches,
    StoppedBeforeUpdate,
    TrainingDiverged,
    batch_summary,
    disable_cudnn_attention,
    guard_training_step,
    locate_nan,
    nonfinite_grads,
    train_until_stopped,
)


def test_batch_summary_counts_empty_mask_rows_and_non_finite_values() -> None:
    inputs = {
        "completion_mask": torch.tensor([[1, 1, 0], [0, 0, 0]]),
        "advantages": torch.tensor([0.5, float("nan")]),
        "flags": torch.tensor([True, False]),
        "example_ids": ["a", "b"],
        "num_items_in_batch": 2,
    }
    summary = batch_summary(inputs)
    assert summary["completion_mask"]["rows_summing_to_zero"] == 1
    assert summary["completion_mask"]["row_sum_min"] == 0.0
    assert summary["advantages"]["non_finite"] == 1 and summary["advantages"]["max"] == 0.5
    assert summary["flags"] == {"shape": [2], "dtype": "bool"}
    assert summary["example_ids"] == {"type": "list", "len": 2}
    assert summary["num_items_in_batch"] == 2
    json.dumps(summary)  # it goes to a file


def test_nonfinite_grads_names_only_trainable_parameters_with_nan_or_inf() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[1].weight.requires_grad_(False)
    model[0].weight.grad = torch.tensor([[1.0, float("inf")], [0.0, 0.0]])
    model[0].bias.grad = torch.zeros(2)
    model[1].weight.grad = torch.full((1, 2), float("nan"))  # frozen: ignored
    assert nonfinite_grads(model) == ["0.weight"]
    model[0].weight.grad = torch.zeros(2, 2)
    assert nonfinite_grads(model) == []


class FakeTrainer:
    """The two methods the guard wraps, accumulating gradients over micro-batches like HF's Trainer;
    a masked-out infinity gives a finite loss and a NaN gradient."""

    def __init__(self, batches: list[list[float]]) -> None:
        self.state = SimpleNamespace(global_step=0)
        self.w = torch.nn.Parameter(torch.ones(3))
        self.model = SimpleNamespace(named_parameters=lambda: [("lora.w", self.w)])
        self.batches = [
            {"x": torch.tensor(x), "mask": torch.tensor([[0 if v == float("inf") else 1 for v in x]])}
            for x in batches
        ]

    def _prepare_inputs(self, batch: int) -> dict[str, Any]:
        return self.batches[batch]

    def compute_loss(self, model: Any, inputs: dict[str, Any], num_items_in_batch: int | None = None) -> Any:
        keep = inputs["mask"][0].bool()
        return torch.where(keep, self.w * inputs["x"], torch.zeros(3)).sum()

    def training_step(self, model: Any, batch: int, num_items_in_batch: int | None = None) -> torch.Tensor:
        self.steps_taken = getattr(self, "steps_taken", 0) + 1  # TRL's micro-batch counter
        loss = self.compute_loss(model, self._prepare_inputs(batch), num_items_in_batch)
        loss.backward()
        return loss.detach()


BAD = [1.0, float("inf"), 3.0]


def test_guard_drops_only_the_micro_batch_with_a_nan_gradient_and_logs_its_summary(tmp_path: Path) -> None:
    trainer = FakeTrainer([[1.0, 2.0, 3.0], BAD, [10.0, 20.0, 30.0]])
    report = tmp_path / "train" / "diverged.json"
    dropped = guard_training_step(trainer, report)
    assert float(trainer.training_step(trainer.model, 0, 3)) == 6.0
    assert not report.parent.exists()
    assert float(trainer.training_step(trainer.model, 1, 3)) == 4.0  # finite: masked out of the forward only
    assert torch.equal(trainer.w.grad, torch.tensor([1.0, 2.0, 3.0]))  # the first micro-batch's, restored
    trainer.training_step(trainer.model, 2, 3)
    assert torch.equal(trainer.w.grad, torch.tensor([11.0, 22.0, 33.0]))  # first + third, the second left out
    assert not report.exists()
    lines = (report.parent / "dropped_micro_batches.jsonl").read_text().splitlines()
    (logged,) = [json.loads(line) for line in lines]
    assert (logged["micro_batch"], logged["optimizer_step"], logged["first_params"]) == (2, 1, ["lora.w"])
    assert logged["loss"] == 4.0
    assert logged["batch"]["x"]["non_finite"] == 1
    assert logged["batch"]["mask"]["row_sum_min"] == 2.0
    assert logged["anomaly"]["error"] == "Function 'MulBackward0' returned nan values in its 0th output."
    assert "self.w * inputs" in logged["anomaly"]["forward_trace"]  # the forward line that made it
    assert trainer.steps_taken == 3  # the second pass went around training_step
    assert dropped.dropped == [{"optimizer_step": 1, "micro_batch": 2}]
    assert (dropped.at_step(1), dropped.at_step(2), dropped.consecutive) == (1, 0, 0)


def test_a_step_whose_every_micro_batch_is_dropped_leaves_no_gradient_to_step_on(tmp_path: Path) -> None:
    trainer = FakeTrainer([BAD, BAD])
    guard_training_step(trainer, tmp_path / "diverged.json")
    trainer.training_step(trainer.model, 0, 2)
    trainer.training_step(trainer.model, 1, 2)
    assert trainer.w.grad is None  # torch's optimizers skip a parameter without a gradient


def test_guard_stops_after_too_many_dropped_in_a_row_and_writes_diverged_json(tmp_path: Path) -> None:
    trainer = FakeTrainer([[1.0, 2.0, 3.0], BAD])
    report = tmp_path / "diverged.json"
    guard_training_step(trainer, report, max_consecutive=3)
    trainer.training_step(trainer.model, 1, 1)
    trainer.state.global_step = 1
    trainer.training_step(trainer.model, 1, 1)
    stop = r"lora\.w\) after micro-batch 3, during optimizer step 2, and 3 micro-batches in a row"
    with pytest.raises(StoppedBeforeUpdate, match=stop):
        trainer.training_step(trainer.model, 1, 1)
    written = json.loads(report.read_text())
    assert written["dropped"] == [
        {"optimizer_step": 1, "micro_batch": 1},
        {"optimizer_step": 2, "micro_batch": 2},
        {"optimizer_step": 2, "micro_batch": 3},
    ]
    assert trainer.w.grad is None  # stopped before any update, with nothing non-finite left behind


def test_only_the_first_dropped_micro_batch_is_run_again_under_anomaly_mode(tmp_path: Path) -> None:
    trainer = FakeTrainer([BAD, BAD])
    guard_training_step(trainer, tmp_path / "diverged.json")
    trainer.training_step(trainer.model, 0, 2)
    trainer.training_step(trainer.model, 1, 2)
    lines = (tmp_path / "dropped_micro_batches.jsonl").read_text().splitlines()
    assert ["anomaly" in json.loads(line) for line in lines] == [True, False]


def test_locate_nan_says_when_the_pass_comes_out_finite() -> None:
    w = torch.nn.Parameter(torch.ones(2))
    assert locate_nan(lambda: (w * 2).sum().backward()) == {"reproduced": False}


def test_dropped_micro_batches_stop_at_the_total_limit_even_when_apart() -> None:
    record = DroppedMicroBatches(max_consecutive=3, max_dropped=3)
    assert record.record(1, 1) is None
    record.kept()  # a good micro-batch came between
    assert record.record(2, 9) is None
    record.kept()
    assert record.record(3, 17) == "3 micro-batches in all"


def test_training_keeps_attention_off_the_cudnn_kernel() -> None:
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert disable_cudnn_attention() is True
        assert torch.backends.cuda.cudnn_sdp_enabled() is False
        assert disable_cudnn_attention() is False
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_a_stop_before_the_update_keeps_the_weights_and_any_other_divergence_fails() -> None:
    """The guard's stop leaves the last finite step's weights, so training returns its reason and the
    job goes on to save and post-evaluate them; a NaN gradient norm (logged after an update) or any
    other error still fails the job."""
    assert train_until_stopped(lambda: None) is None

    def guard_stops() -> None:
        raise StoppedBeforeUpdate("training diverged: ... stopped before the update")

    assert train_until_stopped(guard_stops) == "training diverged: ... stopped before the update"

    def norm_is_nan() -> None:
        raise TrainingDiverged("training diverged: gradient norm nan at step 2")

    with pytest.raises(TrainingDiverged, match="gradient norm nan"):
        train_until_stopped(norm_is_nan)
    with pytest.raises(MemoryError):
        train_until_stopped(lambda: (_ for _ in ()).throw(MemoryError()))
