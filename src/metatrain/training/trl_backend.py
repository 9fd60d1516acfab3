"""Inner training on TRL's GRPOTrainer: the agent's verifiers ToolEnv becomes a multi-turn
tool-calling GRPO run. ``train_job`` is the sandbox target; it imports agent code.

Mapping (DESIGN.md): dataset = ``env.get_dataset()`` (prompts already carry the system prompt);
tools = ``env.tools``, each returning the text the eval shows (``environment.as_eval_tool``: JSON,
not TRL's empty render of a list); one TRL reward per rubric function (weights via
``reward_weights``), each called with verifiers message objects;
``max_tool_calling_iterations = max_turns - 1``; tool calls parsed with the project dialect
(``training.dialect``), the same parser the hidden eval uses; with the task's
``final_answer_turn`` (carried in the bundle manifest), the last tool round ends in the eval's
final-answer prompt, and each generation is capped at the eval's per-turn ``max_tokens``
(``training.final_turn``). A step with no non-zero advantage makes no optimizer update
(``training.update_gate``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metatrain.specs import BundleManifest
from metatrain.training.dialect import install_parser
from metatrain.training.divergence import (
    DroppedMicroBatches,
    TrainingDiverged,
    disable_cudnn_attention,
    guard_training_step,
    train_until_stopped,
)
from metatrain.training.environment import (
    RewardFn,
    as_eval_tool,
    call_reward,
    is_stateful,
    load_job_environment,
    rollout_environment_factory,
    to_vf_messages,
    user_reward_funcs,
)
from metatrain.training.table import lora_config, trl_config_kwargs
from metatrain.training.update_gate import UpdateGate, gate_updates_on_signal, groups_with_signal


class RewardFunctionError(RuntimeError):
    """A rubric function raised during training: the job fails with this message."""


def _trl_reward(func: RewardFn, parser: Any) -> Any:
    name = getattr(func, "__name__", "reward")

    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        out: list[float] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row = {
                k: (v[i] if isinstance(v, list) and len(v) == len(prompts) else v) for k, v in columns.items()
            }
            env_state = getattr(row.pop("environments", None), "state", {})
            completion_msgs = to_vf_messages(completion) if isinstance(completion, list) else completion
            prompt_msgs = to_vf_messages(prompt) if isinstance(prompt, list) else prompt
            try:
                out.append(
                    call_reward(
                        func,
                        prompt=prompt_msgs,
                        completion=completion_msgs,
                        answer=row.get("answer", ""),
                        info=row.get("info") or {},
                        task=row.get("task", "default"),
                        state={**env_state, "prompt": prompt_msgs, "completion": completion_msgs, **row},
                        parser=parser,
                    )
                )
            except Exception as exc:
                raise RewardFunctionError(
                    f"rubric function {name} raised {type(exc).__name__}: {exc}"
                ) from exc
        return out

    reward.__name__ = name
    return reward


class _MetricsWriter:
    """Appends TRL's per-step logs to ``metrics.jsonl`` (the parent tails it for progress)."""

    def __init__(self, path: Path, max_steps: int) -> None:
        self.path = path
        self.max_steps = max_steps
        self.t0 = time.monotonic()
        self.gate: UpdateGate | None = None
        self.dropped: DroppedMicroBatches | None = None
        self.group_signal: Callable[[], float | None] | None = None
        """The latest batch's ``groups_with_signal``, read when a row is written."""

    def write(self, step: int, logs: dict[str, Any]) -> None:
        row = {"step": step, "max_steps": self.max_steps, "elapsed": round(time.monotonic() - self.t0, 3)}
        row.update({k: v for k, v in logs.items() if isinstance(v, int | float)})
        if self.gate is not None:
            row["update_skipped"] = self.gate.skipped(step)
        if self.dropped is not None:
            row["micro_batches_dropped"] = self.dropped.at_step(step)
        share = self.group_signal() if self.group_signal is not None else None
        if share is not None:
            row["groups_with_signal"] = share
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")


def out_of_time(elapsed: float, steps_done: int, train_elapsed: float, stop_after: float) -> bool:
    """Whether another step, at the mean step time so far, would end past ``stop_after`` seconds."""
    if steps_done <= 0:
        return elapsed >= stop_after
    return elapsed + train_elapsed / steps_done > stop_after


def _callbacks(writer: _MetricsWriter, t0: float, stop_after: float | None) -> list[Any]:
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if (logs and "loss" in logs) or (logs and any(k.startswith("reward") for k in logs)):
                writer.write(int(state.global_step), dict(logs))
            grad_norm = (logs or {}).get("grad_norm")
            if isinstance(grad_norm, int | float) and not math.isfinite(grad_norm):
                raise TrainingDiverged(
                    f"training diverged: gradient norm {grad_norm} at step {int(state.global_step)}; "
                    "stopped before sampling from the broken weights"
                )

    class DeadlineCallback(TrainerCallback):  # type: ignore[misc]
        """Ends training after a step when the next one would not finish before the deadline."""

        stopped = False

        def __init__(self, stop_after: float) -> None:
            self.stop_after = stop_after

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.train_t0 = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.monotonic()
            steps = int(state.global_step)
            if steps < int(state.max_steps or 0) and out_of_time(
                now - t0, steps, now - self.train_t0, self.stop_after
            ):
                control.should_training_stop = True
                self.stopped = True

    callbacks: list[Any] = [MetricsCallback()]
    if stop_after is not None:
        callbacks.append(DeadlineCallback(stop_after))
    return callbacks


def _samples_callback(trainer: Any, path: Path) -> Any:
    """A callback appending a few of each step's rollouts to ``samples.jsonl``. It reads TRL 1.16's
    private ``_logs`` (the latest generation batch); tests/test_slow_training.py pins that."""
    from transformers import TrainerCallback

    from metatrain.training.samples import append_samples, sample_rows

    class SamplesCallback(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and any(k.startswith("reward") for k in logs):
                append_samples(path, sample_rows(int(state.global_step), trainer._logs))

    return SamplesCallback()


def train_job(
    bundle_dir: str,
    out_dir: str,
    model_dir: str,
    device: str = "cpu",
    seed: int = 0,
    stop_after_seconds: float | None = None,
) -> dict[str, Any]:
    """Run GRPO for one bundle; saves merged safetensors weights to ``out_dir/model``.

    With ``stop_after_seconds``, training ends early (and still saves) once the next step would
    end past that many seconds from the start of this call.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from metatrain.training.final_turn import FinalTurnGRPOTrainer

    t0 = time.monotonic()
    bundle = Path(bundle_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = BundleManifest.model_validate_json((bundle / "bundle.json").read_text())
    table = manifest.job.train
    env = load_job_environment(bundle / "workspace", manifest.job)
    dataset = env.get_dataset()
    keep = [c for c in dataset.column_names if c in {"prompt", "answer", "info", "task", "example_id"}]
    dataset = dataset.select_columns(keep)
    funcs = user_reward_funcs(env)
    parser = getattr(env, "parser", None)
    stateful = is_stateful(env)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    install_parser(tokenizer)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    if device.startswith("cuda"):
        disable_cudnn_attention()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, use_safetensors=True)
    kwargs = trl_config_kwargs(
        table, output_dir=str(out / "trl"), device=device, max_turns=int(env.max_turns), seed=seed
    )
    kwargs["reward_weights"] = [w for _, w in funcs]
    writer = _MetricsWriter(out / "metrics.jsonl", table.max_steps)
    callbacks = _callbacks(writer, t0, stop_after_seconds)
    trainer = FinalTurnGRPOTrainer(
        model=model,
        reward_funcs=[_trl_reward(f, parser) for f, _ in funcs],
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(table),
        tools=[] if stateful else [as_eval_tool(t) for t in env.tools],
        environment_factory=rollout_environment_factory(env) if stateful else None,
        callbacks=callbacks,
        final_answer_turn=manifest.final_answer_turn,
        turn_max_tokens=manifest.turn_max_tokens,
    )
    trainer.add_callback(_samples_callback(trainer, out / "samples.jsonl"))
    dropped = writer.dropped = guard_training_step(trainer, out / "diverged.json")
    gate = writer.gate = gate_updates_on_signal(trainer)
    writer.group_signal = lambda: groups_with_signal(  # TRL 1.16's latest generation batch, in group order
        list(trainer._logs["advantages"]), table.rollouts_per_example
    )
    t_train = time.monotonic()
    diverged = train_until_stopped(trainer.train)
    train_seconds = time.monotonic() - t_train
    trained: Any = trainer.model
    if table.lora is not None:
        trained = trained.merge_and_unload()
    model_out = out / "model"
    trained.save_pretrained(model_out, safe_serialization=True)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(model_out)
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
    return {
        "train_seconds": train_seconds,
        "setup_seconds": t_train - t0,
        "steps": int(trainer.state.global_step),
        "stopped_at_deadline": any(getattr(c, "stopped", False) for c in callbacks),
        "diverged": diverged,
        "dataset_size": len(dataset),
        "history": history,
        "final_answer_turn": bool(trainer.final_answer_turn),
        "turn_max_tokens": int(trainer.generation_config.max_new_tokens),
        "trainer_class": type(trainer).__name__,
        "skipped_updates": list(gate.skipped_steps),
        "dropped_micro_batches": list(dropped.dropped),
    }
