"""The ``local`` outer trainer: tinker-cookbook's RL loop over the local torch/peft backend.

The agent is an embedded model (default ``qwen2.5-coder-0.5b``, the one with native tool calling) or a
Hugging Face model directory, rendered with its own chat template; LoRA training, sampling and
checkpoints run in this process on CPU or one GPU (:mod:`metatrain.outer.local_backend`). Everything
else (the loop, the bridge, the dataset, resume) is shared with the ``tinker`` trainer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs

from metatrain.outer.config import LOCAL_AGENT_MODEL

LOCAL_DEFAULTS: dict[str, Any] = {"agent_model": LOCAL_AGENT_MODEL, "renderer": None, "trainer": "local"}


@attrs.frozen
class LocalTrainer:
    """``train(options)``: ``OuterConfig`` fields plus ``resume``, ``episode_factory``, ``device``."""

    name: str = "local"
    description: str = "tinker-cookbook RL loop on a local torch+peft backend (CPU or one GPU)"

    def train(self, config: dict[str, Any]) -> None:
        from metatrain.outer.local_backend import LocalBackendOptions, LocalServiceClient, run_rl_main
        from metatrain.outer.run import cookbook_config, prepare_run

        options = dict(config)
        device = str(options.pop("device", None) or "auto")
        outer, episode_factory = prepare_run(options, LOCAL_DEFAULTS)
        service = LocalServiceClient(
            outer.log_dir / "checkpoints", options=LocalBackendOptions(device=device)
        )
        try:
            asyncio.run(run_rl_main(cookbook_config(outer, episode_factory=episode_factory), service))
        finally:
            service.close()
