"""metatrain's own plugins, registered through the same entry point a third party uses."""

from __future__ import annotations

from metatrain.default_plugins.local_provider import LocalProvider
from metatrain.default_plugins.local_trainer import LocalTrainer
from metatrain.default_plugins.openai_policy import OpenAIPolicyFactory
from metatrain.default_plugins.reference_policy import ReferencePolicyFactory
from metatrain.default_plugins.transformers_policy import TransformersPolicyFactory
from metatrain.hookspecs import Register, hookimpl


@hookimpl
def register_compute_providers(register: Register) -> None:
    register(LocalProvider())


@hookimpl
def register_policies(register: Register) -> None:
    register(ReferencePolicyFactory())
    register(OpenAIPolicyFactory())
    register(TransformersPolicyFactory())


@hookimpl
def register_outer_trainers(register: Register) -> None:
    register(LocalTrainer())
