"""pytest plugin for family authors (entry point ``pytest11``): ``assert_family_conforms``.

def test_my_family_conforms(assert_family_conforms):
    assert_family_conforms(MyFamily())
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from metatrain.conformance.checks import BUDGETS, check_family, failed
from metatrain.protocols import TaskFamily


@pytest.fixture
def assert_family_conforms() -> Callable[..., None]:
    """Run the conformance kit on a family and fail the test with every problem found."""

    def run(
        family: TaskFamily, budgets: tuple[str, ...] = BUDGETS, only: tuple[str, ...] | None = None
    ) -> None:
        bad = failed(check_family(family, budgets, only))
        if bad:
            pytest.fail("\n".join(f"[{r.budget}] {r.name}: {r.detail}" for r in bad), pytrace=False)

    return run
