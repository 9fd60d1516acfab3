"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from metatrain.plugins import load_plugins
from metatrain.protocols import TaskFamily
from metatrain.specs import TaskSpec


@pytest.fixture(scope="session")
def calc_chain() -> TaskFamily:
    return load_plugins().task_family("calc_chain")


@pytest.fixture(scope="session")
def fast_spec(calc_chain: TaskFamily) -> TaskSpec:
    return calc_chain.task_spec("fast")


@pytest.fixture
def reference_workspace(tmp_path: Path, calc_chain: TaskFamily) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    for name, text in calc_chain.reference_job("fast").items():
        (ws / name).write_text(text)
    return ws
