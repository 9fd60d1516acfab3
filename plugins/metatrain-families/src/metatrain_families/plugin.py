"""Registers the built-in task families with metatrain."""

from __future__ import annotations

from metatrain.hookspecs import Register, hookimpl
from metatrain_families.calc_chain import CalcChain


@hookimpl
def register_task_families(register: Register) -> None:
    register(CalcChain())
