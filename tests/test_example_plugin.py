"""The example third-party family is a real installed distribution that registers and conforms."""

from __future__ import annotations

from collections.abc import Callable

from metatrain.plugins import load_plugins


def test_example_family_registers_through_its_own_distribution() -> None:
    regs = {r.name: r for r in load_plugins().registrations("task_families")}
    assert regs["digit_sum"].distribution == "metatrain-example-family"


def test_example_family_passes_the_kit(assert_family_conforms: Callable[..., None]) -> None:
    assert_family_conforms(load_plugins().task_family("digit_sum"), budgets=("fast",))
