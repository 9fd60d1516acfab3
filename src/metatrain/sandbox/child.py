"""Sandbox child: restrict this process, then import and call the target.

Run as ``python -s -P -B .../sandbox/child.py`` with a JSON config on stdin.  Before the
restrictions apply it only imports the standard library and its sibling modules ``landlock.py``
and ``linux.py`` (loaded by file path, so no package ``__init__`` runs).  Messages for the parent
(one JSON object per line) go to the inherited ``result_fd``, never to stdout.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import resource
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

EXIT_OK, EXIT_RAISED, EXIT_SETUP = 0, 1, 2


def _sibling(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"_metatrain_sandbox_{name}", Path(__file__).with_name(f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load sandbox helper {name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_line(fd: int, line: str) -> None:
    data = memoryview((line + "\n").encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]


def _send(fd: int, message: dict[str, Any]) -> None:
    _write_line(fd, json.dumps(message, allow_nan=False))


def _describe(exc: BaseException) -> str:
    """Type, message and the last few frames outside this file."""
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, MemoryError):
        head = f"memory limit exceeded ({head})"
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__][-6:]
        tail = "".join(traceback.format_list(frames))
    except MemoryError:
        tail = ""
    return f"{head}\n{tail}".strip()[:4000]


def _restrict(config: dict[str, Any]) -> dict[str, Any]:
    """Apply Landlock and drop capabilities; report everything in force (incl. the parent's steps)."""
    landlock = _sibling("landlock")
    linux = _sibling("linux")
    info: dict[str, Any] = {"applied": True}
    netns = linux.net_namespace()
    info["netns"] = bool(netns and config["parent_netns"] and netns != config["parent_netns"])
    rules = [(str(p), str(m)) for p, m in config["rules"]]
    private = {p for p, dev in config["host_devs"].items() if linux.device_id(p) not in (None, dev)}
    if "/dev/shm" in private:
        info["shm"] = "private"
        rules.append(("/dev/shm", "rw"))
    else:
        info["shm"] = "host" if any(p == "/dev/shm" for p, _ in rules) else "none"
    info["hidden"] = sorted(private - {"/dev/shm"})
    if landlock.abi_version() is None:
        info.update(landlock_abi=None, landlock="unavailable")
        landlock.set_no_new_privs()
    else:  # Landlock exists: failing to apply it is fatal, never silently weaker
        info.update(landlock.restrict(rules, deny_tcp=not config["network"]))
    info["landlock_tcp_denied"] = bool(info.get("handled_access_net"))
    info["capabilities_dropped"] = linux.drop_capabilities()
    info["no_new_privs"] = True
    info["rlimits"] = {name: list(resource.getrlimit(getattr(resource, name))) for name in config["rlimits"]}
    layers = [
        name for name, on in (("netns", info["netns"]), ("landlock-tcp", info["landlock_tcp_denied"])) if on
    ]
    info["network"] = "allowed" if config["network"] else "+".join(layers) or "NOT ISOLATED"
    info["filesystem"] = "landlock" if info["landlock_abi"] else "NOT ISOLATED"
    weak = info["filesystem"] != "landlock" or info["network"] == "NOT ISOLATED"
    info["level"] = "degraded" if weak or not info["capabilities_dropped"] else "full"
    info["env_dropped"] = config["env_dropped"]
    return info


def _call(target: str, payload: dict[str, Any]) -> Any:
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return func(**payload)


def main() -> int:
    config = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    fd = int(config["result_fd"])
    os.set_inheritable(fd, False)
    try:
        isolation = _restrict(config)
    except Exception as exc:
        _send(fd, {"kind": "result", "ok": False, "error": f"sandbox setup failed: {_describe(exc)}"})
        return EXIT_SETUP
    _send(fd, {"kind": "isolation", "isolation": isolation})
    sys.path[0:0] = config["sys_path"]
    sys.path.extend(p for p in config["sys_path_append"] if p not in sys.path)
    if config["sys_path"] or config["sys_path_append"]:
        os.environ["PYTHONPATH"] = os.pathsep.join([*config["sys_path"], *config["sys_path_append"]])
    try:
        value = _call(config["target"], config["payload"])
    except BaseException as exc:  # whatever the target raised (SystemExit too) is the result
        error = _describe(exc)
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
        del exc
        _send(fd, {"kind": "result", "ok": False, "error": error})
        return EXIT_RAISED
    try:
        encoded = json.dumps({"kind": "result", "ok": True, "value": value}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _send(fd, {"kind": "result", "ok": False, "error": f"result is not JSON-serialisable: {exc}"})
        return EXIT_RAISED
    _write_line(fd, encoded)
    return EXIT_OK


if __name__ == "__main__":
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
