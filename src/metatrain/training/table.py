"""The training table: one bounded key set, mapped onto each inner-training backend here.

| table key            | TRL ``GRPOConfig``                                   |
|----------------------|------------------------------------------------------|
| model                | the prepared embedded model directory                |
| max_steps            | ``max_steps``                                        |
| rollouts_per_example | ``num_generations``                                  |
| batch_size           | prompts per step: ``per_device_train_batch_size = batch_size * rollouts`` |
| max_tokens           | ``max_completion_length`` (all turns of a rollout)   |
| temperature          | ``temperature``                                      |
| lr                   | ``learning_rate``                                    |
| optimizer            | ``optim`` (adamw→adamw_torch, sgd, adafactor)        |
| scheduler            | ``lr_scheduler_type``                                |
| warmup               | ``warmup_steps``                                     |
| loss                 | ``loss_type``                                        |
| lora.{rank,alpha,dropout} | ``peft.LoraConfig(r, lora_alpha, lora_dropout, target_modules="all-linear")`` |
"""

from __future__ import annotations

from typing import Any

from metatrain.specs import Bounds, TrainingTable

TRL_OPTIM = {"adamw": "adamw_torch", "adamw_8bit": "adamw_bnb_8bit", "sgd": "sgd", "adafactor": "adafactor"}


def bound_errors(
    table: TrainingTable, bounds: Bounds, dataset_size: int | None = None, max_turns: int | None = None
) -> list[str]:
    """Every way ``table`` (and the environment's size and turn cap) breaks ``bounds``."""
    errors: list[str] = []

    def rng(key: str, value: float, r: Any) -> None:
        if value not in r:
            errors.append(f"train.{key} = {value} is outside the allowed range [{r.min}, {r.max}]")

    if table.model not in bounds.models:
        errors.append(f"train.model = {table.model!r} is not allowed; choose one of {bounds.models}")
    rng("max_steps", table.max_steps, bounds.max_steps)
    rng("rollouts_per_example", table.rollouts_per_example, bounds.rollouts_per_example)
    rng("batch_size", table.batch_size, bounds.batch_size)
    rng("max_tokens", table.max_tokens, bounds.max_tokens)
    rng("temperature", table.temperature, bounds.temperature)
    rng("lr", table.lr, bounds.lr)
    rng("warmup", table.warmup, bounds.warmup)
    for key, allowed in (
        ("optimizer", bounds.optimizers),
        ("scheduler", bounds.schedulers),
        ("loss", bounds.losses),
    ):
        value = getattr(table, key)
        if value not in allowed:
            errors.append(f"train.{key} = {value!r} is not allowed; choose one of {allowed}")
    if table.lora is None:
        if not bounds.full_finetune_allowed:
            errors.append("a [train.lora] table is required: full fine-tuning is not allowed for this budget")
    else:
        rng("lora.rank", table.lora.rank, bounds.lora_rank)
    if table.warmup > table.max_steps:
        errors.append(f"train.warmup = {table.warmup} exceeds train.max_steps = {table.max_steps}")
    if dataset_size is not None and dataset_size not in bounds.dataset_size:
        errors.append(
            f"the dataset has {dataset_size} examples; "
            f"allowed [{bounds.dataset_size.min}, {bounds.dataset_size.max}]"
        )
    if max_turns is not None and max_turns not in bounds.max_turns:
        errors.append(f"max_turns = {max_turns} is outside [{bounds.max_turns.min}, {bounds.max_turns.max}]")
    return errors


def trl_config_kwargs(
    table: TrainingTable, *, output_dir: str, device: str, max_turns: int, seed: int = 0
) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments for this table."""
    on_cpu = not device.startswith("cuda")
    return {
        "output_dir": output_dir,
        "max_steps": table.max_steps,
        "num_generations": table.rollouts_per_example,
        "per_device_train_batch_size": table.batch_size * table.rollouts_per_example,
        "gradient_accumulation_steps": 1,
        "max_completion_length": table.max_tokens,
        "temperature": table.temperature,
        "learning_rate": table.lr,
        "optim": TRL_OPTIM[table.optimizer],
        "lr_scheduler_type": table.scheduler,
        "warmup_steps": table.warmup,
        "loss_type": table.loss,
        "max_tool_calling_iterations": max(0, max_turns - 1),
        "beta": 0.0,
        "use_cpu": on_cpu,
        "bf16": not on_cpu,
        "gradient_checkpointing": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "seed": seed,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def lora_config(table: TrainingTable) -> Any:
    """A ``peft.LoraConfig`` for the table, or None for a full fine-tune."""
    if table.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=table.lora.rank,
        lora_alpha=table.lora.alpha,
        lora_dropout=table.lora.dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
