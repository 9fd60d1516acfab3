"""The training table: one bounded key set, mapped onto each inner-training backend here.

``MAPPING`` is the single source of truth: one row per table key with what it becomes in TRL's
``GRPOConfig`` and in a prime-rl v0.6.0 ``rl.toml`` (dotted key paths; ``env[0]`` is the job's
one ``[[orchestrator.train.env]]``). ``trl_config_kwargs`` and ``primerl_values`` are both derived
from it; ``docs/prime-rl.md`` prints it. Values each backend fixes regardless of the table
(devices, logging, checkpoints) are added by the backend, not here.

| key                  | TRL ``GRPOConfig``                  | prime-rl ``rl.toml``                          |
|----------------------|-------------------------------------|-----------------------------------------------|
| model                | (prepared model directory)          | ``model.name`` (the resolved model ref)       |
| max_steps            | ``max_steps``                       | ``max_steps``                                 |
| rollouts_per_example | ``num_generations``                 | ``orchestrator.group_size``                   |
| batch_size (prompts) | ``gradient_accumulation_steps``     | ``orchestrator.batch_size`` (x rollouts)      |
|                      | (micro-batch: one prompt's group)   |                                               |
| max_tokens           | ``max_completion_length``           | ``max_completion_tokens``, ``seq_len``       |
| temperature          | ``temperature``                     | ``orchestrator.train.sampling.temperature``   |
| lr                   | ``learning_rate``                   | ``trainer.optim.lr`` (+ orchestrator's)       |
| optimizer            | ``optim``                           | ``trainer.optim.type`` (+ weight decay 0)     |
| scheduler, warmup    | ``lr_scheduler_type``, ``warmup_steps`` | ``trainer.scheduler.*``               |
| loss                 | ``loss_type``                       | ``trainer.loss.type = "default"``             |
| advantage_scale      | ``scale_rewards``                   | (only "none": its advantage is centred only)  |
| lora                 | ``peft.LoraConfig`` (lora_config)   | ``trainer.model.lora.{rank,alpha,dropout}``   |
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, get_args

import attrs

from metatrain.specs import Bounds, TrainingTable
from metatrain.specs.job import AdvantageScale

TRL_OPTIM = {"adamw": "adamw_torch", "adamw_8bit": "adamw_bnb_8bit", "sgd": "sgd", "adafactor": "adafactor"}
PRIMERL_OPTIM = {"adamw": "adamw", "adamw_8bit": "adamw", "sgd": "sgd"}
PRIMERL_PROMPT_ALLOWANCE = 1536
"""Tokens of prompt (system prompt, tool schemas, tool results) budgeted on top of ``max_tokens``."""


class UnsupportedSetting(ValueError):
    """A table value the chosen backend cannot express; the message names the key and the choices."""


Conversion = Callable[[TrainingTable], dict[str, Any]]


@attrs.frozen
class KeyMapping:
    """One training-table key: the keys it sets in each backend and how its value is converted."""

    key: str
    trl_keys: tuple[str, ...]
    primerl_keys: tuple[str, ...]
    to_trl: Conversion
    to_primerl: Conversion
    note: str = ""


def _none(table: TrainingTable) -> dict[str, Any]:
    return {}


def primerl_seq_len(max_tokens: int) -> int:
    """prime-rl ``seq_len``: completion budget plus a prompt allowance, a multiple of 512, at least 2048."""
    return max(2048, 512 * math.ceil((max_tokens + PRIMERL_PROMPT_ALLOWANCE) / 512))


def _primerl_optimizer(table: TrainingTable) -> dict[str, Any]:
    kind = PRIMERL_OPTIM.get(table.optimizer)
    if kind is None:
        raise UnsupportedSetting(
            f"train.optimizer = {table.optimizer!r} has no prime-rl v0.6.0 equivalent; "
            f"choose one of {sorted(PRIMERL_OPTIM)}"
        )
    out: dict[str, Any] = {"trainer.optim.type": kind, "trainer.optim.weight_decay": 0.0}
    if kind == "sgd":  # torch.optim.SGD defaults, as TRL's "sgd" uses them
        out.update({"trainer.optim.momentum": 0.0, "trainer.optim.nesterov": False})
    return out


def _primerl_scheduler(table: TrainingTable) -> dict[str, Any]:
    if table.scheduler == "constant":  # transformers' constant schedule takes no warmup: neither do we
        return {"trainer.scheduler.type": "constant"}
    out: dict[str, Any] = {
        "trainer.scheduler.type": table.scheduler,
        "trainer.scheduler.warmup_steps": table.warmup,
        "trainer.scheduler.min_lr": 0.0,
    }
    if table.scheduler == "linear":
        out["trainer.scheduler.decay_steps"] = table.max_steps - table.warmup
    return out


def _primerl_advantage(table: TrainingTable) -> dict[str, Any]:
    if table.advantage_scale in (None, "none"):
        return {}
    raise UnsupportedSetting(
        f"train.advantage_scale = {table.advantage_scale!r} has no prime-rl v0.6.0 equivalent: its "
        "advantage is the reward minus the group mean, never divided by a std; choose 'none' or leave "
        "it unset"
    )


def _primerl_lora(table: TrainingTable) -> dict[str, Any]:
    if table.lora is None:
        return {}
    return {
        "trainer.model.lora.rank": table.lora.rank,
        "trainer.model.lora.alpha": float(table.lora.alpha),
        "trainer.model.lora.dropout": table.lora.dropout,
    }


MAPPING: tuple[KeyMapping, ...] = (
    KeyMapping(
        "model",
        (),
        ("model.name",),
        _none,
        lambda t: {"model.name": t.model},
        "TRL loads the prepared model directory; prime-rl's model.name is replaced by the resolved "
        "model reference (a Hugging Face id on pods, or a prepared directory)",
    ),
    KeyMapping(
        "max_steps",
        ("max_steps",),
        ("max_steps",),
        lambda t: {"max_steps": t.max_steps},
        lambda t: {"max_steps": t.max_steps},
    ),
    KeyMapping(
        "rollouts_per_example",
        ("num_generations",),
        ("orchestrator.group_size",),
        lambda t: {"num_generations": t.rollouts_per_example},
        lambda t: {"orchestrator.group_size": t.rollouts_per_example},
    ),
    KeyMapping(
        "batch_size",
        ("per_device_train_batch_size", "gradient_accumulation_steps"),
        ("orchestrator.batch_size",),
        lambda t: {
            "per_device_train_batch_size": t.rollouts_per_example,
            "gradient_accumulation_steps": t.batch_size,
        },
        lambda t: {"orchestrator.batch_size": t.batch_size * t.rollouts_per_example},
        "the table counts prompts per step; a step takes prompts x rollouts rollouts in both backends "
        "(TRL: one prompt's group per micro-batch, batch_size micro-batches per optimizer step)",
    ),
    KeyMapping(
        "max_tokens",
        ("max_completion_length",),
        (
            "orchestrator.train.sampling.max_completion_tokens",
            "orchestrator.train.env[0].max_total_completion_tokens",
            "seq_len",
        ),
        lambda t: {"max_completion_length": t.max_tokens},
        lambda t: {
            "orchestrator.train.sampling.max_completion_tokens": t.max_tokens,
            "orchestrator.train.env[0].max_total_completion_tokens": t.max_tokens,
            "seq_len": primerl_seq_len(t.max_tokens),
        },
        "all turns of a rollout together; each turn is capped at the eval's per-turn max_tokens (the "
        "bundle's turn_max_tokens, when below) in both backends; prime-rl's seq_len is max_tokens + "
        f"{PRIMERL_PROMPT_ALLOWANCE} rounded up to 512 (at least 2048)",
    ),
    KeyMapping(
        "temperature",
        ("temperature",),
        ("orchestrator.train.sampling.temperature",),
        lambda t: {"temperature": t.temperature},
        lambda t: {"orchestrator.train.sampling.temperature": t.temperature},
    ),
    KeyMapping(
        "lr",
        ("learning_rate",),
        ("trainer.optim.lr", "orchestrator.optim.lr"),
        lambda t: {"learning_rate": t.lr},
        lambda t: {"trainer.optim.lr": t.lr, "orchestrator.optim.lr": t.lr},
        "prime-rl reads trainer.optim.lr for a single run; orchestrator.optim.lr (multi-run) is kept equal",
    ),
    KeyMapping(
        "optimizer",
        ("optim",),
        (
            "trainer.optim.type",
            "trainer.optim.weight_decay",
            "trainer.optim.momentum",
            "trainer.optim.nesterov",
        ),
        lambda t: {"optim": TRL_OPTIM[t.optimizer]},
        _primerl_optimizer,
        "adamw_8bit runs as plain adamw on prime-rl (no 8-bit state); adafactor has no prime-rl "
        "equivalent and is refused; weight decay 0 and SGD without momentum match TRL's defaults",
    ),
    KeyMapping(
        "scheduler, warmup",
        ("lr_scheduler_type", "warmup_steps"),
        (
            "trainer.scheduler.type",
            "trainer.scheduler.warmup_steps",
            "trainer.scheduler.decay_steps",
            "trainer.scheduler.min_lr",
        ),
        lambda t: {"lr_scheduler_type": t.scheduler, "warmup_steps": t.warmup},
        _primerl_scheduler,
        "linear: warmup, then decay to 0 over the remaining steps; cosine: warmup, then cosine to 0; "
        "constant ignores warmup in transformers, so prime-rl gets a plain constant schedule too",
    ),
    KeyMapping(
        "loss",
        ("loss_type",),
        ("trainer.loss.type",),
        lambda t: {"loss_type": t.loss},
        lambda t: {"trainer.loss.type": "default"},
        "prime-rl v0.6.0 has one built-in RL objective (DPPO + KL); the TRL loss variants "
        "(grpo, dr_grpo, dapo, bnpo) differ in normalisation only and all map to it",
    ),
    KeyMapping(
        "advantage_scale",
        ("scale_rewards",),
        (),
        lambda t: {} if t.advantage_scale is None else {"scale_rewards": t.advantage_scale},
        _primerl_advantage,
        "group: TRL's default, (r - group mean) / group std, so a group whose rewards differ by a "
        "small partial credit gets advantages as large as one with a right answer; batch: divided by "
        "the std over the whole batch, keeping groups' relative sizes; none: centred only, prime-rl "
        "v0.6.0's only advantage (group and batch are refused there)",
    ),
    KeyMapping(
        "lora",
        (),
        ("trainer.model.lora.rank", "trainer.model.lora.alpha", "trainer.model.lora.dropout"),
        _none,
        _primerl_lora,
        "TRL gets a peft.LoraConfig (lora_config, all linear layers); prime-rl's default target "
        "modules are the same attention and MLP projections; no table means a full fine-tune",
    ),
)


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
        ("advantage_scale", bounds.advantage_scales),
    ):
        value = getattr(table, key)
        if value is not None and value not in allowed:
            errors.append(f"train.{key} = {value!r} is not allowed; choose one of {allowed}")
    scales = bounds.advantage_scales
    if table.advantage_scale is None and set(scales) != set(get_args(AdvantageScale)):
        # unset means each backend's own default, which differ: a narrowed choice must be explicit
        errors.append(f"train.advantage_scale must be set to one of {scales}: the backends' defaults differ")
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


def trl_values(table: TrainingTable) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments the table sets (from ``MAPPING``)."""
    out: dict[str, Any] = {}
    for row in MAPPING:
        out.update(row.to_trl(table))
    return out


def primerl_values(table: TrainingTable) -> dict[str, Any]:
    """The prime-rl ``rl.toml`` key paths the table sets (from ``MAPPING``); raises UnsupportedSetting."""
    out: dict[str, Any] = {}
    for row in MAPPING:
        out.update(row.to_primerl(table))
    return out


def trl_config_kwargs(
    table: TrainingTable, *, output_dir: str, device: str, max_turns: int, seed: int = 0
) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments for this table."""
    on_cpu = not device.startswith("cuda")
    return {
        "output_dir": output_dir,
        **trl_values(table),
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
