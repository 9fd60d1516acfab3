"""Stopping at the micro-batch whose backward pass made a gradient non-finite, and saying what it held.

An H200 ledger job logged a NaN gradient norm at its second step with a finite loss, in bf16 and in
float32, with SDPA and with eager attention alike. The step-level check (the logged gradient norm)
says that it happened; this guard says where: after each micro-batch's backward it checks the
trainable parameters' gradients and, at the first non-finite one, writes the micro-batch's tensors
in summary (shapes, masks, value ranges, non-finite counts) to ``diverged.json`` and stops before
the optimizer step, so no weight is ever updated from it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class TrainingDiverged(RuntimeError):
    """A gradient or gradient norm became NaN or infinite."""


def tensor_summary(value: Any) -> dict[str, Any] | None:
    """Shape, dtype and (for floating or integer tensors) sum, range and non-finite count; None if
    ``value`` is not a tensor."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    out: dict[str, Any] = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value.numel() == 0 or value.dtype == torch.bool:
        return out
    data = value.detach().float()
    finite = torch.isfinite(data)
    out["non_finite"] = int((~finite).sum())
    kept = data[finite]
    if kept.numel():
        out |= {"min": float(kept.min()), "max": float(kept.max()), "sum": float(kept.sum())}
    if value.dim() == 2 and not value.is_floating_point():
        row_sums = data.sum(dim=1)
        out["row_sum_min"] = float(row_sums.min())
        out["rows_summing_to_zero"] = int((row_sums == 0).sum())
    return out


def batch_summary(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Every tensor of a prepared micro-batch in summary; other values by type (a list by length)."""
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        summary = tensor_summary(value)
        if summary is not None:
            out[key] = summary
        elif isinstance(value, list | tuple):
            out[key] = {"type": type(value).__name__, "len": len(value)}
        elif value is None or isinstance(value, bool | int | float | str):
            out[key] = value
        else:
            out[key] = {"type": type(value).__name__}
    return out


def nonfinite_grads(model: Any) -> list[str]:
    """Names of trainable parameters whose gradient holds a NaN or an infinity."""
    import torch

    named = [(n, p.grad) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None]
    if not named:
        return []
    norms = torch.stack([g.detach().float().norm() for _, g in named])
    if bool(torch.isfinite(norms).all()):
        return []
    return [n for (n, _), v in zip(named, norms.tolist(), strict=True) if not math.isfinite(v)]


def guard_training_step(trainer: Any, report_path: Path) -> None:
    """Wrap this trainer's ``_prepare_inputs`` and ``training_step`` (on the instance only) so that a
    micro-batch leaving a non-finite gradient writes ``report_path`` and raises TrainingDiverged."""
    prepare, train_step = trainer._prepare_inputs, trainer.training_step
    last: dict[str, Any] = {}
    micro_batches = 0

    def prepared(batch: Any) -> Any:
        inputs = prepare(batch)
        last["inputs"] = inputs
        return inputs

    def step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal micro_batches
        loss = train_step(model, inputs, *args, **kwargs)
        micro_batches += 1
        bad = nonfinite_grads(model)
        if bad:
            optimizer_step = int(trainer.state.global_step) + 1
            held = last.get("inputs")
            report = {
                "optimizer_step": optimizer_step,
                "micro_batch": micro_batches,
                "loss": float(loss.detach().float()) if hasattr(loss, "detach") else loss,
                "non_finite_params": len(bad),
                "first_params": bad[:20],
                "batch": batch_summary(held) if isinstance(held, Mapping) else None,
            }
            report_path.parent.mkdir(parents=True, exist_ok=True)
            report_path.write_text(json.dumps(report, indent=1))
            raise TrainingDiverged(
                f"training diverged: non-finite gradient in {len(bad)} parameters (first "
                f"{bad[0]}) after micro-batch {micro_batches}, during optimizer step {optimizer_step}; "
                f"stopped before the update; the micro-batch is summarised in {report_path.name}"
            )
        return loss

    trainer._prepare_inputs = prepared
    trainer.training_step = step
