"""Hook specifications: every extension point of metatrain.

Each hook receives a ``register`` callable. Call it once per thing you provide:
``register(obj)``; the object's ``name`` attribute is its registry key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("metatrain")
hookimpl = pluggy.HookimplMarker("metatrain")

Register = Callable[[Any], None]


@hookspec
def register_task_families(register: Register) -> None:
    """Register TaskFamily objects."""


@hookspec
def register_compute_providers(register: Register) -> None:
    """Register ComputeProvider objects."""


@hookspec
def register_reward_schemes(register: Register) -> None:
    """Register RewardScheme objects."""


@hookspec
def register_outer_trainers(register: Register) -> None:
    """Register OuterTrainer objects."""


@hookspec
def register_policies(register: Register) -> None:
    """Register Policy factories (objects with ``name`` and ``create(spec) -> Policy``)."""
