"""metatrain: an agent writes RL training jobs for small models; the jobs are validated, trained on
GPUs, scored on hidden evals, and that score trains the agent."""

from __future__ import annotations

__version__ = "0.1.0"

from metatrain.hookspecs import hookimpl
from metatrain.plugins import PluginError, PluginManager, load_plugins
from metatrain.protocols import (
    ComputeProvider,
    OuterTrainer,
    Policy,
    PolicyContext,
    PolicyFactory,
    PolicyTurn,
    RewardInputs,
    RewardScheme,
    TaskFamily,
    ToolCall,
)


def run_episode(*args: object, **kwargs: object) -> object:
    """Run one episode (see ``metatrain.episode.loop.run_episode``)."""
    from metatrain.episode.loop import run_episode as _run

    return _run(*args, **kwargs)  # type: ignore[arg-type]


__all__ = [
    "ComputeProvider",
    "OuterTrainer",
    "PluginError",
    "PluginManager",
    "Policy",
    "PolicyContext",
    "PolicyFactory",
    "PolicyTurn",
    "RewardInputs",
    "RewardScheme",
    "TaskFamily",
    "ToolCall",
    "__version__",
    "hookimpl",
    "load_plugins",
    "run_episode",
]
