"""The outer loop's RL dataset: groups of episodes over the training families, and a holdout arm.

Batch ``i`` holds ``groups_per_batch`` groups; group ``j`` of it runs ``group_size`` episodes of family
``families[(i * groups_per_batch + j) % len(families)]`` under the key ``b{i:04d}-g{j:02d}`` (stable
across restarts, which is what lets :class:`~metatrain.outer.store.PersistingRollouts` serve finished
episodes after a crash). The held-out family is refused for training; the holdout arm evaluates the
current policy on it (the cookbook's test-set evaluator, every ``eval_every`` steps).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import chz
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder

from metatrain.outer.bridge import EpisodeEnv, EpisodeFn
from metatrain.outer.config import EpisodeSettings, OuterConfig
from metatrain.outer.episodes import allowed_models, outer_plugins, real_episode
from metatrain.outer.prompts import PromptCodec, make_codec
from metatrain.outer.store import EpisodeLog

EpisodeFactory = Callable[[str, EpisodeSettings, Path, str, int], EpisodeFn]
CodecFactory = Callable[[str, str | None], PromptCodec]


@functools.cache
def cached_codec(model_name: str, renderer: str | None) -> PromptCodec:
    return make_codec(model_name, renderer)


@attrs.define(slots=False)
class EpisodeGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of one family; picklable (heavy objects are built in ``make_envs``)."""

    key: str
    family: str
    group_size: int
    settings: EpisodeSettings
    log_dir: str
    agent_model: str
    renderer: str | None
    seed: int = 0
    persist: bool = True
    models: tuple[str, ...] = ()
    episode_factory: EpisodeFactory = real_episode
    codec_factory: CodecFactory = cached_codec
    _envs: list[EpisodeEnv] = attrs.field(factory=list, init=False, eq=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_envs"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._envs = []

    async def make_envs(self) -> Sequence[Env]:
        codec = self.codec_factory(self.agent_model, self.renderer)
        scheme = outer_plugins().reward_scheme(self.settings.reward)
        log_dir = Path(self.log_dir)
        log = EpisodeLog(log_dir / "episodes.jsonl")
        envs = [
            EpisodeEnv(
                key=f"{self.key}-e{i}",
                episode_fn=self.episode_factory(
                    self.family,
                    self.settings,
                    log_dir / "runs",
                    f"{self.key}-e{i}-{uuid.uuid4().hex[:8]}",
                    self.seed * 1000 + i,
                ),
                codec=codec,
                scheme=scheme,
                budget=self.settings.budget,
                turn_timeout_s=self.settings.turn_timeout_s,
                on_end=log,
                models=self.models,
            )
            for i in range(self.group_size)
        ]
        self._envs.extend(envs)
        return envs

    async def cleanup(self) -> None:
        for env in self._envs:
            env.cancel()
        self._envs.clear()

    def logging_tags(self) -> list[str]:
        return [self.family]


@attrs.frozen
class EpisodeDataset(RLDataset):
    """``steps`` batches of ``groups_per_batch`` episode groups (see the module docstring)."""

    config: OuterConfig
    families: tuple[str, ...]
    steps: int
    groups_per_batch: int
    prefix: str = "b"
    persist: bool = True
    episode_factory: EpisodeFactory = real_episode
    codec_factory: CodecFactory = cached_codec

    def __len__(self) -> int:
        return self.steps

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.steps:
            raise IndexError(f"batch {index} out of range (0..{self.steps - 1})")
        c = self.config
        out = []
        for j in range(self.groups_per_batch):
            family = self.families[(index * self.groups_per_batch + j) % len(self.families)]
            out.append(
                EpisodeGroupBuilder(
                    key=f"{self.prefix}{index:04d}-g{j:02d}",
                    family=family,
                    group_size=c.group_size,
                    settings=c.episode,
                    log_dir=str(c.log_dir),
                    agent_model=c.agent_model,
                    renderer=c.renderer,
                    seed=c.seed + index * 100 + j,
                    persist=self.persist,
                    models=tuple(_models(family, c.episode.budget)),
                    episode_factory=self.episode_factory,
                    codec_factory=self.codec_factory,
                )
            )
        return out


def _models(family: str, budget: str) -> list[str]:
    try:
        return allowed_models(family, budget)
    except Exception:  # an unknown family fails loudly when its episode starts, not here
        return []


def check_families(config: OuterConfig) -> None:
    """Every training family exists and is not held out; the holdout family exists and is held out."""
    pm = outer_plugins()
    for name in config.families:
        family = pm.task_family(name)
        if family.held_out:
            raise ValueError(f"family {name!r} is held out (evaluation only): it cannot be a training family")
    if config.holdout_family is not None:
        pm.task_family(config.holdout_family)


@chz.chz
class OuterDatasetBuilder(RLDatasetBuilder):
    """The cookbook's dataset builder for an outer run (``config_json`` is an ``OuterConfig``).

    ``episode_factory``: ``"module:function"`` of an :data:`EpisodeFactory` replacing real episodes
    (scripted episodes for tests and demos); empty means real episodes.
    """

    config_json: str
    episode_factory: str = ""

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        config = OuterConfig.model_validate_json(self.config_json)
        kw: dict[str, Any] = {}
        if self.episode_factory:
            kw["episode_factory"] = import_factory(self.episode_factory)
        return training_dataset(config, **kw), holdout_dataset(config, **kw)


def import_factory(path: str) -> EpisodeFactory:
    """Resolve ``"module:function"``."""
    import importlib

    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"episode factory {path!r}: expected 'module:function'")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise ValueError(f"episode factory {path!r}: {attr} is not a function of {module}")
    return fn  # type: ignore[no-any-return]


def training_dataset(config: OuterConfig, **kw: Any) -> EpisodeDataset:
    return EpisodeDataset(config, tuple(config.families), config.steps, config.groups_per_batch, **kw)


def holdout_dataset(config: OuterConfig, **kw: Any) -> EpisodeDataset | None:
    """One batch of ``holdout_groups`` groups on the held-out family (not persisted: re-run each time)."""
    if config.holdout_family is None or config.holdout_every == 0:
        return None
    return EpisodeDataset(
        config, (config.holdout_family,), 1, config.holdout_groups, prefix="holdout-", persist=False, **kw
    )
