"""The ``tinker`` outer trainer: tinker-cookbook 0.5.8's RL loop on the hosted Tinker service (0.38).

Defaults are the original run's: Qwen/Qwen3.6-35B-A3B rendered with ``qwen3_5_disable_thinking``,
LoRA rank 8, lr 4e-5, group size 8, 5 groups per batch, async with at most 2 steps off policy,
the importance-sampling loss (``ppo`` as an option).

The key: ``TINKER_API_KEY`` is read once and *removed from this process's environment* before
anything else runs, then handed to ``tinker.ServiceClient(api_key=...)`` through the cookbook's one
service-client lookup. Episode threads, validation probes, inner jobs and sandboxes therefore never
see it, and it is never written to a log, config or artifact.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import attrs

from metatrain.hookspecs import Register, hookimpl
from metatrain.outer.config import TINKER_AGENT_MODEL, TINKER_RENDERER

KEY_ENV = "TINKER_API_KEY"
TINKER_DEFAULTS: dict[str, Any] = {
    "agent_model": TINKER_AGENT_MODEL,
    "renderer": TINKER_RENDERER,
    "trainer": "tinker",
}


class MissingKeyError(ValueError):
    """No Tinker API key in the environment."""


def take_key() -> str:
    """Remove ``TINKER_API_KEY`` from the environment and return it (error naming the variable if unset)."""
    key = os.environ.pop(KEY_ENV, "").strip()
    if not key:
        raise MissingKeyError(f"--trainer tinker needs a Tinker API key: set {KEY_ENV}")
    return key


def service_client(key: str) -> Any:
    """The hosted ServiceClient the cookbook would build, with the key passed explicitly."""
    import tinker
    from tinker_cookbook.utils.git_rev import recipe_user_metadata

    from metatrain.outer.run import RECIPE_NAME

    return tinker.ServiceClient(api_key=key, user_metadata=recipe_user_metadata(RECIPE_NAME))


async def _run(config: Any, key: str) -> None:
    from tinker_cookbook.rl import train as rl_train

    from metatrain.outer.local_backend import use_local_backend

    # use_local_backend rebinds the one ServiceClient lookup in rl.train; any client object works.
    with use_local_backend(service_client(key)):
        await rl_train.main(config)


@attrs.frozen
class TinkerTrainer:
    """``train(options)``: ``OuterConfig`` fields plus ``resume`` and ``episode_factory``."""

    name: str = "tinker"
    description: str = "tinker-cookbook RL loop on hosted Tinker (TINKER_API_KEY)"

    def train(self, config: dict[str, Any]) -> None:
        from metatrain.outer.run import cookbook_config, prepare_run

        options = dict(config)
        options.pop("device", None)  # the service decides where the agent runs
        key = take_key()
        try:
            outer, episode_factory = prepare_run(options, TINKER_DEFAULTS)
            asyncio.run(_run(cookbook_config(outer, episode_factory=episode_factory), key))
        finally:
            os.environ.setdefault(KEY_ENV, key)


@hookimpl
def register_outer_trainers(register: Register) -> None:
    register(TinkerTrainer())
