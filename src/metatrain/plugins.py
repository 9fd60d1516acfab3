"""The plugin manager: loads the ``metatrain`` entry-point group once, lazily.

Build one with :func:`load_plugins` and pass it around; nothing is loaded at import time.

Environment variables:
- ``METATRAIN_LOAD_PLUGINS``: comma-separated distribution names to load (allow-list);
  unset means all. The core distribution (``metatrain``) is always loaded.
- ``METATRAIN_TRACE_PLUGINS``: when set, print every registration with its source.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import attrs
import pluggy

from metatrain import hookspecs

KINDS: dict[str, str] = {
    "task_families": "register_task_families",
    "compute_providers": "register_compute_providers",
    "reward_schemes": "register_reward_schemes",
    "outer_trainers": "register_outer_trainers",
    "policies": "register_policies",
}


class PluginError(Exception):
    """A plugin is missing, duplicated or malformed."""


@attrs.frozen
class Registration:
    """One registered thing and where it came from."""

    kind: str
    name: str
    obj: Any
    plugin: str
    distribution: str


class PluginManager:
    """Registry of everything plugins provide, keyed by kind and name."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("metatrain")
        self._pm.add_hookspecs(hookspecs)
        self._sources: dict[str, str] = {}
        self._registry: dict[str, dict[str, Registration]] | None = None

    def register(self, plugin: object, name: str, distribution: str = "<local>") -> None:
        """Register a plugin module or object (as tests and scripts do)."""
        self._pm.register(plugin, name=name)
        self._sources[name] = distribution
        self._registry = None

    def unregister(self, name: str) -> None:
        self._pm.unregister(name=name)
        self._sources.pop(name, None)
        self._registry = None

    def load_entrypoints(self, allow: Iterable[str] | None = None) -> None:
        """Load the ``metatrain`` entry-point group (optionally filtered by distribution)."""
        allowed = set(allow) if allow is not None else None
        for ep in metadata.entry_points(group="metatrain"):
            dist = ep.dist.name if ep.dist is not None else "<unknown>"
            if allowed is not None and dist not in allowed and dist != "metatrain":
                continue
            if self._pm.has_plugin(ep.name) or ep.name in self._sources:
                existing = self._sources.get(ep.name, "?")
                if existing == dist:
                    continue
                raise PluginError(
                    f"entry point name {ep.name!r} from {dist} clashes with one from {existing}"
                )
            self.register(ep.load(), name=ep.name, distribution=dist)

    def _collect(self) -> dict[str, dict[str, Registration]]:
        if self._registry is not None:
            return self._registry
        trace = bool(os.environ.get("METATRAIN_TRACE_PLUGINS"))
        registry: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        for kind, hook_name in KINDS.items():
            hook = getattr(self._pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                plugin_name = impl.plugin_name
                source = self._sources.get(plugin_name, "<local>")

                def register(
                    obj: Any, _kind: str = kind, _plugin: str = plugin_name, _src: str = source
                ) -> None:
                    name = getattr(obj, "name", None)
                    if not isinstance(name, str) or not name:
                        raise PluginError(f"plugin {_plugin} registered a {_kind} object without a name")
                    if name in registry[_kind]:
                        prev = registry[_kind][name]
                        raise PluginError(
                            f"duplicate {_kind} name {name!r}: from {_plugin} ({_src}) "
                            f"and {prev.plugin} ({prev.distribution})"
                        )
                    registry[_kind][name] = Registration(_kind, name, obj, _plugin, _src)
                    if trace:
                        print(f"[metatrain plugins] {_kind}:{name} <- {_plugin} ({_src})", file=sys.stderr)

                impl.function(register=register)
        self._registry = registry
        return registry

    def registrations(self, kind: str) -> list[Registration]:
        if kind not in KINDS:
            raise PluginError(f"unknown plugin kind {kind!r}; kinds are {sorted(KINDS)}")
        return sorted(self._collect()[kind].values(), key=lambda r: r.name)

    def get(self, kind: str, name: str) -> Any:
        regs = self._collect()[kind]
        if name not in regs:
            known = ", ".join(sorted(regs)) or "none"
            raise PluginError(
                f"no {kind.removesuffix('s').replace('_', ' ')} named {name!r} (registered: {known})"
            )
        return regs[name].obj

    def task_family(self, name: str) -> Any:
        return self.get("task_families", name)

    def compute_provider(self, name: str) -> Any:
        return self.get("compute_providers", name)

    def reward_scheme(self, name: str) -> Any:
        return self.get("reward_schemes", name)

    def policy(self, name: str) -> Any:
        return self.get("policies", name)


def load_plugins() -> PluginManager:
    """A plugin manager with every installed ``metatrain`` entry point loaded."""
    pm = PluginManager()
    allow = os.environ.get("METATRAIN_LOAD_PLUGINS")
    pm.load_entrypoints([a.strip() for a in allow.split(",") if a.strip()] if allow else None)
    return pm
