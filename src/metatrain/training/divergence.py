"""Dropping a micro-batch whose backward pass made a gradient non-finite, saying what it held, and
stopping when that keeps happening.

An H200 ledger job logged a NaN gradient norm at its second step with a finite loss, in bf16 and in
float32, with SDPA and with eager attention alike; two H100 multi_hop jobs (2026-12-06) met the same
at steps 17 and 13, each in one micro-batch of eight rollouts with finite inputs, after their
training accuracy had risen from 0.02 to 0.14-0.27. The step-level check (the logged gradient norm)
says that it happened; this guard says where and keeps the run: after each micro-batch's backward it
checks the gradients that micro-batch alone made (the step's earlier ones are set aside while it
runs, then added back) and, at a non-finite one, puts back the step's earlier gradients without it
(so the step's update comes from the others, as AMP's gradient scaler skips an overflowing step),
appends the micro-batch in summary (shapes, masks, value ranges, non-finite counts) to
``dropped_micro_batches.jsonl``, and counts it. The first one dropped is run once more under
autograd's anomaly mode, which names the backward function that first returned a NaN and the forward
line that made it (``anomaly`` in its log line). Only when ``max_consecutive`` micro-batches in a
row, or ``max_dropped`` in all, were dropped does it write ``diverged.json`` and raise
StoppedBeforeUpdate (a TrainingDiverged), before the optimizer step: no weight is ever updated from a
non-finite gradient, so the TRL backend saves the last finite step's weights and the job goes on to its
post-eval, its summary naming the stop (``diverged``).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs


class TrainingDiverged(RuntimeError):
    """A gradient or gradient norm became NaN or infinite."""


class StoppedBeforeUpdate(TrainingDiverged):
    """The guard stopped training before any optimizer step used a non-finite gradient: the weights
    are those of the last finite step, fit to save and evaluate."""


def train_until_stopped(train: Callable[[], Any]) -> str | None:
    """Run ``train``; the guard's reason if it stopped training before a broken update, else None.

    Any other error (a NaN gradient norm after an update, which leaves broken weights) propagates.
    A job that learned for 18 steps and then met a run of NaN micro-batches keeps what it learned
    (docs/families.md, twentieth session: such a run ended with no post-eval before this).
    """
    try:
        train()
    except StoppedBeforeUpdate as exc:
        return str(exc)
    return None


def disable_cudnn_attention() -> bool:
    """Keep scaled-dot-product attention off its cuDNN kernel for training; returns whether it was on.

    On an H100 (torch's default order picks cuDNN first there) a multi_hop job's first dropped
    micro-batch, re-run under anomaly mode, named ``ScaledDotProductCudnnAttentionBackward0`` as the
    backward that first returned NaN, with a finite loss and finite inputs, after 18 steps whose
    training reward had risen to 1.0 (docs/families.md, twentieth session); four micro-batches in a
    row then stopped the run. The flash and memory-efficient kernels compute the same attention.
    """
    import torch

    was_on = bool(torch.backends.cuda.cudnn_sdp_enabled())
    torch.backends.cuda.enable_cudnn_sdp(False)
    return was_on


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


def locate_nan(step: Callable[[], Any]) -> dict[str, Any]:
    """Run ``step`` (a forward and backward pass) under autograd's anomaly mode: the backward function
    that first returned a NaN (``error``) and the end of the forward traceback that created it
    (``forward_trace``), or ``reproduced: False`` when the pass came out finite this time."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                step()
        except RuntimeError as exc:
            traces = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
            return {"error": str(exc)[:500], "forward_trace": traces[-1][-3000:] if traces else None}
    return {"reproduced": False}


def _loss_and_backward(trainer: Any, model: Any, inputs: Mapping[str, Any], args: Any, kwargs: Any) -> None:
    """The forward and backward pass of a prepared micro-batch, without ``training_step``: TRL's
    picks its micro-batch by a counter that a second call would advance."""
    num_items = args[0] if args else kwargs.get("num_items_in_batch")
    trainer.compute_loss(model, inputs, num_items_in_batch=num_items).backward()


def _set_aside(model: Any) -> list[tuple[Any, Any]]:
    """Each trainable parameter with its gradient so far (None where it has none), taken off it: the
    next backward pass then writes that micro-batch's gradient alone, with no copy made."""
    aside = [(p, p.grad) for _, p in model.named_parameters() if p.requires_grad]
    for param, _ in aside:
        param.grad = None
    return aside


def _add_back(aside: list[tuple[Any, Any]]) -> None:
    """Accumulate the set-aside gradients into the current ones, as autograd would have."""
    for param, grad in aside:
        if grad is None:
            continue
        if param.grad is None:
            param.grad = grad
        else:
            param.grad.add_(grad)


def _put_back(aside: list[tuple[Any, Any]]) -> None:
    """Drop the current gradients for the set-aside ones."""
    for param, grad in aside:
        param.grad = grad


@attrs.define
class DroppedMicroBatches:
    """The micro-batches a guard dropped, and when it gives up."""

    max_consecutive: int = 4
    max_dropped: int = 16
    dropped: list[dict[str, int]] = attrs.field(factory=list)
    consecutive: int = 0

    def at_step(self, optimizer_step: int) -> int:
        """How many micro-batches optimizer step ``optimizer_step`` (1-based) lost."""
        return sum(d["optimizer_step"] == optimizer_step for d in self.dropped)

    def kept(self) -> None:
        """A micro-batch came through finite: the run of drops in a row ends."""
        self.consecutive = 0

    def record(self, optimizer_step: int, micro_batch: int) -> str | None:
        """Count one dropped micro-batch; the reason to stop, or None to go on."""
        self.dropped.append({"optimizer_step": optimizer_step, "micro_batch": micro_batch})
        self.consecutive += 1
        if self.consecutive >= self.max_consecutive:
            return f"{self.consecutive} micro-batches in a row"
        if len(self.dropped) >= self.max_dropped:
            return f"{len(self.dropped)} micro-batches in all"
        return None


def guard_training_step(
    trainer: Any, report_path: Path, *, max_consecutive: int = 4, max_dropped: int = 16
) -> DroppedMicroBatches:
    """Wrap this trainer's ``_prepare_inputs`` and ``training_step`` (on the instance only): a
    micro-batch leaving a non-finite gradient is dropped (its gradient contribution undone) and
    appended to ``dropped_micro_batches.jsonl`` beside ``report_path``; past the limits the guard
    writes ``report_path`` and raises StoppedBeforeUpdate instead."""
    prepare, train_step = trainer._prepare_inputs, trainer.training_step
    last: dict[str, Any] = {}
    micro_batches = 0
    record = DroppedMicroBatches(max_consecutive=max_consecutive, max_dropped=max_dropped)
    log_path = report_path.parent / "dropped_micro_batches.jsonl"

    def prepared(batch: Any) -> Any:
        inputs = prepare(batch)
        last["inputs"] = inputs
        return inputs

    def step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal micro_batches
        aside = _set_aside(model)
        loss = train_step(model, inputs, *args, **kwargs)
        micro_batches += 1
        bad = nonfinite_grads(model)
        if not bad:
            _add_back(aside)
            record.kept()
            return loss
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
        if not record.dropped and isinstance(held, Mapping):
            report["anomaly"] = locate_nan(lambda: _loss_and_backward(trainer, model, held, args, kwargs))
        _put_back(aside)  # after the re-run, whose backward adds to the gradients it finds
        report_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as fh:
            fh.write(json.dumps(report) + "\n")
        stop = record.record(optimizer_step, micro_batches)
        if stop is None:
            return loss
        report["dropped"] = record.dropped
        report_path.write_text(json.dumps(report, indent=1))
        raise StoppedBeforeUpdate(
            f"training diverged: non-finite gradient in {len(bad)} parameters (first {bad[0]}) after "
            f"micro-batch {micro_batches}, during optimizer step {optimizer_step}, and {stop} were dropped "
            f"for it; stopped before the update; the micro-batches are summarised in {log_path.name}"
        )

    trainer._prepare_inputs = prepared
    trainer.training_step = step
    return record
