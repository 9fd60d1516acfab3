"""An outer run = tinker-cookbook's ``rl.train.main`` with the episode dataset and the bridge.

:func:`cookbook_config` maps an :class:`~metatrain.outer.config.OuterConfig` onto the cookbook's
``Config`` (async off-policy, the chosen loss, checkpoints every ``save_every`` steps into ``LOG_DIR``,
finished episodes persisted through :class:`~metatrain.outer.store.PersistingRollouts`). The loop,
advantages (group-centred rewards), datum assembly, staleness bookkeeping, checkpointing and resume
(from ``LOG_DIR/checkpoints.jsonl``) are the cookbook's own.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from metatrain.outer.config import OuterConfig
from metatrain.outer.dataset import OuterDatasetBuilder
from metatrain.outer.store import PersistingRollouts

RECIPE_NAME = "metatrain_outer"


def cookbook_config(config: OuterConfig, model_name: str | None = None, episode_factory: str = "") -> Any:
    """The cookbook ``Config`` of this outer run (``model_name`` overrides ``config.agent_model``)."""
    from tinker_cookbook.rl.train import AsyncConfig, Config

    return Config(
        learning_rate=config.learning_rate,
        dataset_builder=OuterDatasetBuilder(
            config_json=config.model_dump_json(), episode_factory=episode_factory
        ),
        model_name=model_name or config.agent_model,
        recipe_name=RECIPE_NAME,
        max_tokens=config.max_tokens,
        log_path=str(config.log_dir),
        eval_every=config.holdout_every if config.holdout_family else 0,
        save_every=config.save_every,
        load_checkpoint_path=config.load_checkpoint_path,
        renderer_name=config.renderer,
        lora_rank=config.lora_rank,
        loss_fn=config.loss_fn,
        temperature=config.temperature,
        rollout_error_tolerance=PersistingRollouts(str(config.log_dir / "trajectories")),
        async_config=AsyncConfig(
            max_steps_off_policy=config.max_steps_off_policy, groups_per_batch=config.groups_per_batch
        ),
        max_steps=config.steps,
        num_groups_to_log=1,
    )


def configure_logging(log_dir: Path) -> None:
    """Log to ``LOG_DIR/outer.log`` (the console belongs to the progress display)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_dir / "outer.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def prepare_run(options: dict[str, Any], defaults: dict[str, Any]) -> tuple[OuterConfig, str]:
    """(the run's OuterConfig, episode factory path) from an ``OuterTrainer.train`` options dict.

    ``options``: ``OuterConfig`` fields plus ``resume`` (bool) and ``episode_factory`` (str);
    ``defaults``: the trainer's own defaults (agent model, renderer) for fields not given. Checks the
    families, writes ``LOG_DIR/outer-config.json`` (or, on resume, requires the stored one to match).
    """
    from metatrain.outer.config import load_or_write_config
    from metatrain.outer.dataset import check_families

    options = dict(options)
    resume = bool(options.pop("resume", False))
    episode_factory = str(options.pop("episode_factory", "") or "")
    config = OuterConfig.model_validate({**defaults, **{k: v for k, v in options.items() if v is not None}})
    check_families(config)
    config = load_or_write_config(config, resume)
    configure_logging(config.log_dir)
    return config, episode_factory
