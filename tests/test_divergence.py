"""The divergence guard stops at the micro-batch that made a gradient non-finite and describes it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from metatrain.training.divergence import (
    TrainingDiverged,
    batch_summary,
    guard_training_step,
    nonfinite_grads,
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
    """The two methods the guard wraps; a masked-out infinity gives a finite loss and a NaN grad."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(global_step=1)
        self.w = torch.nn.Parameter(torch.ones(3))
        self.model = SimpleNamespace(named_parameters=lambda: [("lora.w", self.w)])
        self.batches = [
            {"x": torch.tensor([1.0, 2.0, 3.0]), "mask": torch.tensor([[1, 1, 1]])},
            {"x": torch.tensor([1.0, float("inf"), 3.0]), "mask": torch.tensor([[1, 0, 1]])},
        ]

    def _prepare_inputs(self, batch: int) -> dict[str, Any]:
        return self.batches[batch]

    def training_step(self, model: Any, batch: int, num_items_in_batch: int | None = None) -> torch.Tensor:
        inputs = self._prepare_inputs(batch)
        keep = inputs["mask"][0].bool()
        loss = torch.where(keep, self.w * inputs["x"], torch.zeros(3)).sum()
        loss.backward()
        return loss.detach()


def test_guard_stops_at_the_micro_batch_with_a_nan_gradient_and_writes_its_summary(tmp_path: Path) -> None:
    trainer = FakeTrainer()
    report = tmp_path / "train" / "diverged.json"
    guard_training_step(trainer, report)
    assert float(trainer.training_step(trainer.model, 0, 2)) == 6.0
    assert not report.exists()
    with pytest.raises(TrainingDiverged, match=r"lora\.w\) after micro-batch 2, during optimizer step 2"):
        trainer.training_step(trainer.model, 1, 2)
    written = json.loads(report.read_text())
    assert written["loss"] == 4.0  # finite: the infinity was masked out of the forward pass only
    assert (written["micro_batch"], written["optimizer_step"], written["first_params"]) == (2, 2, ["lora.w"])
    assert written["batch"]["x"]["non_finite"] == 1
    assert written["batch"]["mask"]["row_sum_min"] == 2.0
