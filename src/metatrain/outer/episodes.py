"""Real episodes behind the bridge: the episode loop with the bridge's policy plugged in by name.

``run_episode`` builds its policy from ``--agent NAME:ARG`` through the plugin manager. The outer
loop registers one extra policy factory, ``outer-bridge``, whose ``create(arg)`` hands out the
:class:`~metatrain.outer.bridge.BridgePolicy` waiting under the episode id ``arg``; the episode loop
itself is unchanged. The same plugin registers the ``validation-only`` provider
(:mod:`metatrain.outer.tiny`).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import attrs

from metatrain.episode.loop import EpisodeConfig, run_episode
from metatrain.hookspecs import Register, hookimpl
from metatrain.outer.bridge import EpisodeFn
from metatrain.outer.config import EpisodeSettings
from metatrain.outer.tiny import VALIDATION_ONLY_PROVIDER, ValidationOnlyProvider
from metatrain.plugins import PluginManager, load_plugins
from metatrain.protocols import Policy, PolicyContext, ProgressFn
from metatrain.specs import EpisodeResult

BRIDGE_POLICY = "outer-bridge"
_WAITING: dict[str, Policy] = {}
_WAITING_LOCK = threading.Lock()


@attrs.frozen
class BridgePolicyFactory:
    """Hands an episode the bridge policy registered under its id (``outer-bridge:<episode id>``)."""

    name: str = BRIDGE_POLICY
    description: str = "The outer loop's queue-backed policy (internal to metatrain train)."

    def create(self, arg: str | None, context: PolicyContext) -> Policy:
        with _WAITING_LOCK:
            policy = _WAITING.pop(arg or "", None)
        if policy is None:
            raise ValueError(f"{BRIDGE_POLICY}:{arg}: no bridge policy is waiting under this episode id")
        return policy


class OuterPlugin:
    """The outer loop's additions to a plugin manager."""

    def __init__(self, pm: PluginManager) -> None:
        self._pm = pm

    @hookimpl
    def register_policies(self, register: Register) -> None:
        register(BridgePolicyFactory())

    @hookimpl
    def register_compute_providers(self, register: Register) -> None:
        register(ValidationOnlyProvider(self._pm.task_family))


@functools.cache
def outer_plugins() -> PluginManager:
    """This process's plugin manager with the outer plugin registered (built once)."""
    pm = load_plugins()
    pm.register(OuterPlugin(pm), name="metatrain-outer", distribution="metatrain")
    pm.registrations("policies")  # build the registry now, not concurrently from episode threads
    return pm


def real_episode(
    family: str, settings: EpisodeSettings, runs_root: Path, episode_id: str, seed: int
) -> EpisodeFn:
    """An EpisodeFn running ``run_episode`` for ``family`` with the bridge policy it is given."""

    def run(policy: Policy, progress: ProgressFn) -> EpisodeResult:
        pm = outer_plugins()
        with _WAITING_LOCK:
            _WAITING[episode_id] = policy
        provider = VALIDATION_ONLY_PROVIDER if settings.inner == "validation-only" else settings.provider
        config = EpisodeConfig(
            family=family,
            agent=f"{BRIDGE_POLICY}:{episode_id}",
            provider=provider,
            budget=settings.budget,
            device=settings.device,
            runs_root=runs_root,
            reward=settings.reward,
            max_turns=settings.max_turns,
            max_attempts=settings.max_attempts,
            max_nudges=settings.max_nudges,
            probe_wall_seconds=settings.probe_wall_seconds,
            train_wall_seconds=settings.train_wall_seconds,
            seed=seed,
        )
        try:
            return run_episode(config, pm, progress)
        finally:
            with _WAITING_LOCK:
                _WAITING.pop(episode_id, None)

    return run


def allowed_models(family: str, budget: str) -> list[str]:
    """The base models a job for ``family`` may choose (for model-choice metrics)."""
    spec: Any = outer_plugins().task_family(family).task_spec(budget)
    return list(spec.bounds.models)
