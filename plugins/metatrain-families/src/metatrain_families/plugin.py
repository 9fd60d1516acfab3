"""Registers the built-in task families with metatrain."""

from __future__ import annotations

from metatrain.hookspecs import Register, hookimpl
from metatrain_families.calc_chain import CalcChain
from metatrain_families.dispatch import Dispatch
from metatrain_families.ledger import Ledger
from metatrain_families.multi_hop import MultiHop
from metatrain_families.string_pipeline import StringPipeline
from metatrain_families.triage import Triage


@hookimpl
def register_task_families(register: Register) -> None:
    register(CalcChain())
    register(Dispatch())
    register(Ledger())
    register(MultiHop())
    register(StringPipeline())
    register(Triage())
