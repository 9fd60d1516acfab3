"""The ``runpod`` compute provider (a warm pool of Runpod GPU pods) and a local emulator of Runpod's API.

Modules: ``config`` (pool settings), ``bootstrap`` (the pinned pod bootstrap), ``api`` (the SDK behind
retries), ``state`` (the durable pool state), ``pool`` (provision, health, reap, bill), ``fleet``
(the queue worker), ``provider`` (the plugin object), ``tokens`` (per-pod runner tokens),
``emulator`` (Runpod's GraphQL API on loopback), ``testing_runner`` (a runner with a fake executor).
"""

from __future__ import annotations

from metatrain.hookspecs import Register, hookimpl
from metatrain_runpod.provider import RunpodProvider

__all__ = ["RunpodProvider"]


@hookimpl
def register_compute_providers(register: Register) -> None:
    register(RunpodProvider())
