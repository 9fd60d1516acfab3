"""The plugin manager: entry points, duplicate names, allow-list, tracing; every hook is documented."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from metatrain import hookspecs
from metatrain.hookspecs import hookimpl
from metatrain.plugins import KINDS, PluginError, PluginManager, load_plugins


class _Thing:
    def __init__(self, name: str) -> None:
        self.name = name


class ThrowawayPlugin:
    @hookimpl
    def register_task_families(self, register):  # type: ignore[no-untyped-def]
        register(_Thing("toy_family"))

    @hookimpl
    def register_compute_providers(self, register):  # type: ignore[no-untyped-def]
        register(_Thing("toy_provider"))

    @hookimpl
    def register_reward_schemes(self, register):  # type: ignore[no-untyped-def]
        register(_Thing("toy_reward"))

    @hookimpl
    def register_outer_trainers(self, register):  # type: ignore[no-untyped-def]
        register(_Thing("toy_trainer"))

    @hookimpl
    def register_policies(self, register):  # type: ignore[no-untyped-def]
        register(_Thing("toy_policy"))


def test_builtins_come_from_their_own_distributions() -> None:
    pm = load_plugins()
    sources = {(r.kind, r.name): r.distribution for kind in KINDS for r in pm.registrations(kind)}
    assert sources[("task_families", "calc_chain")] == "metatrain-families"
    assert sources[("reward_schemes", "default")] == "metatrain-reward"
    assert sources[("compute_providers", "local")] == "metatrain"
    assert sources[("policies", "reference")] == "metatrain"


EXPECTED = {
    "task_families": "toy_family",
    "compute_providers": "toy_provider",
    "reward_schemes": "toy_reward",
    "outer_trainers": "toy_trainer",
    "policies": "toy_policy",
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_hook_registers_through_a_throwaway_plugin(kind: str) -> None:
    pm = PluginManager()
    pm.register(ThrowawayPlugin(), name="throwaway")
    assert [(r.name, r.plugin) for r in pm.registrations(kind)] == [(EXPECTED[kind], "throwaway")]
    pm.unregister("throwaway")
    assert pm.registrations(kind) == []


def test_duplicate_names_name_both_sources() -> None:
    pm = PluginManager()
    pm.register(ThrowawayPlugin(), name="one", distribution="dist-one")
    pm.register(ThrowawayPlugin(), name="two", distribution="dist-two")
    with pytest.raises(
        PluginError, match=r"duplicate task_families name 'toy_family'.*dist-(one|two).*dist-(one|two)"
    ):
        pm.registrations("task_families")


def test_unknown_names_list_what_exists() -> None:
    with pytest.raises(PluginError, match="calc_chain"):
        load_plugins().task_family("no_such_family")


def test_allow_list_keeps_core_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METATRAIN_LOAD_PLUGINS", "metatrain")
    pm = load_plugins()
    assert pm.registrations("task_families") == []
    assert [r.name for r in pm.registrations("compute_providers")] == ["local"]


def test_trace_prints_sources(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("METATRAIN_TRACE_PLUGINS", "1")
    load_plugins().registrations("task_families")
    assert "task_families:calc_chain <- families (metatrain-families)" in capsys.readouterr().err


def test_every_hook_is_documented() -> None:
    docs = (Path(__file__).parents[1] / "docs" / "plugins.md").read_text()
    hooks = [n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("register_")]
    assert sorted(hooks) == sorted(KINDS.values())
    for name in hooks:
        assert f"{name}(register)" in docs, f"{name} is not documented in docs/plugins.md"
