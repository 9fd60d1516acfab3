"""Run ``package.module:function`` in a restricted child Python process."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from metatrain.sandbox import landlock, linux
from metatrain.sandbox.policy import (
    SandboxPolicy,
    child_sys_path,
    compile_rules,
    self_import_root,
    self_root_on_default_path,
)

CHILD_SCRIPT = Path(__file__).with_name("child.py")
OUTPUT_LIMIT = 20_000
HIDE_DIRS = ("/run",)  # covered by an empty tmpfs in the child: no host UNIX sockets
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
SECRET_PREFIXES = ("sk-", "ghp_", "gho_", "ghs_", "github_pat_", "hf_", "xoxb-", "xoxp-", "glpat-", "AKIA")
MIN_SECRET_LEN = 8
# Inherited from the parent only with allow_gpu (device selection, driver libs, NCCL safety knobs).
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
GPU_ENV_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")
_TARGET = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_SIGNAL_NOTES = {
    signal.SIGXCPU: " (cpu limit)",
    signal.SIGXFSZ: " (file size limit)",
    signal.SIGKILL: " (cpu hard limit, out of memory, or killed)",
    signal.SIGSEGV: " (crash; possibly the memory limit)",
}


class SandboxError(Exception):
    """Misuse of the sandbox API (bad target, non-JSON payload); not a failure inside the child."""


@attrs.frozen
class SandboxResult:
    """Outcome of one sandboxed call."""

    ok: bool
    value: Any
    error: str | None
    exit_code: int | None
    stdout: str
    stderr: str
    wall_seconds: float
    isolation: dict[str, Any]
    timed_out: bool = False
    """The call ran into its policy's wall and was killed."""


@functools.cache
def isolation_report() -> dict[str, Any]:
    """What this host supports (cached): Landlock ABI, network namespaces, root."""
    netns = False
    try:
        probe = subprocess.run(
            ["/bin/true"],
            preexec_fn=_probe_netns,
            check=False,
            capture_output=True,
            timeout=10,
        )
        netns = probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        netns = False
    return {"landlock_abi": landlock.abi_version(), "netns": netns, "root": os.geteuid() == 0}


def _probe_netns() -> None:
    if not linux.unshare_network():
        os._exit(1)


def _secret_values(environ: Mapping[str, str]) -> set[str]:
    """Values of the parent's secret-named or token-shaped variables (paths and short values aside)."""
    named = {v for k, v in environ.items() if SECRET_NAME.search(k)}
    shaped = {v for v in environ.values() if v.startswith(SECRET_PREFIXES)}
    return {v for v in named | shaped if len(v) >= MIN_SECRET_LEN and not v.startswith("/")}


def build_env(
    policy: SandboxPolicy, private_tmp: Path, parent_env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The child's environment, built from scratch, and the names dropped as secret-looking.

    Never inherits os.environ (with ``allow_gpu``, only the GPU_ENV / GPU_ENV_PREFIXES names).
    Drops a variable whose name looks secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH,
    ...) or whose value contains a secret value of the parent's env.
    """
    tmp = str(private_tmp)
    env = {
        "PATH": DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": tmp,
        "TMPDIR": tmp,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": f"{tmp}/hf",
        "XDG_CACHE_HOME": f"{tmp}/cache",
        "MPLCONFIGDIR": f"{tmp}/matplotlib",
    }
    parent = os.environ if parent_env is None else parent_env
    if policy.allow_gpu:
        env.update({k: v for k, v in parent.items() if k in GPU_ENV or k.startswith(GPU_ENV_PREFIXES)})
    env.update(policy.env)
    env.pop("PYTHONPATH", None)  # applied by the child after it is restricted
    env.pop("PYTHONHOME", None)
    secrets = _secret_values(parent)
    dropped = sorted(k for k, v in env.items() if SECRET_NAME.search(k) or any(s in v for s in secrets))
    return {k: v for k, v in env.items() if k not in dropped}, dropped


def _rlimits(policy: SandboxPolicy) -> dict[str, tuple[int, int]]:
    limits = {
        "RLIMIT_CPU": (policy.cpu_seconds, policy.cpu_seconds + 2),
        "RLIMIT_FSIZE": (policy.max_file_bytes, policy.max_file_bytes),
        "RLIMIT_NOFILE": (policy.max_open_files, policy.max_open_files),
        "RLIMIT_CORE": (0, 0),
    }
    if policy.memory_bytes is not None:
        limits["RLIMIT_AS"] = (policy.memory_bytes, policy.memory_bytes)
    return limits


def _preexec(
    limits: dict[str, tuple[int, int]], isolate_net: bool, shm_bytes: int, hide: tuple[str, ...]
) -> None:
    """Runs in the forked child before exec: rlimits, a fresh netns, private /dev/shm and /run.

    Namespace steps are best effort; the child checks and reports what took effect.
    """
    linux.die_with_parent()
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), value)
    if isolate_net:
        linux.unshare_network()
    if shm_bytes > 0 or hide:
        linux.private_mounts(shm_bytes, hide)


def _hidden_dirs(policy: SandboxPolicy) -> tuple[str, ...]:
    """HIDE_DIRS that no policy path lives under (those stay visible)."""
    keep = [*policy.writable, *policy.readable, *policy.sys_path, Path("/dev/shm"), Path("/etc/resolv.conf")]
    used = [p.resolve() for p in keep]
    hide = []
    for name in HIDE_DIRS:
        real = Path(name).resolve()
        if os.path.isdir(real) and not any(p == real or real in p.parents for p in used):
            hide.append(str(real))
    return tuple(hide)


def _validate(target: str, payload: Any) -> str:
    if not isinstance(target, str) or not _TARGET.match(target):
        raise SandboxError(f"target must look like 'package.module:function', got {target!r}")
    if not isinstance(payload, dict) or not all(isinstance(k, str) for k in payload):
        raise SandboxError("payload must be a dict with str keys (passed as keyword arguments)")
    try:
        return json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SandboxError(f"payload is not JSON-serialisable: {exc}") from exc


def _read_capped(path: Path, limit: int = OUTPUT_LIMIT) -> str:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= limit:
            return fh.read().decode("utf-8", "replace")
        head = fh.read(limit // 10)
        fh.seek(size - (limit - limit // 10))
        tail = fh.read()
    skipped = size - len(head) - len(tail)
    note = f"\n...[{skipped} bytes truncated]...\n"
    return head.decode("utf-8", "replace") + note + tail.decode("utf-8", "replace")


def _drain(fd: int, sink: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(65536):
            sink.append(chunk)


def _messages(raw: bytes) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in raw.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and isinstance(msg.get("kind"), str):
            out.setdefault(msg["kind"], msg)  # first wins: the child writes each kind once
    return out


def _signal_error(code: int) -> str:
    sig = signal.Signals(-code)
    return f"killed by signal {sig.name}{_SIGNAL_NOTES.get(sig, '')}"


def run_sandboxed(policy: SandboxPolicy, target: str, payload: dict[str, Any]) -> SandboxResult:
    """Call ``target(**payload)`` in a fresh, restricted ``python child.py`` process.

    The result comes back over a private pipe, so anything the code prints only lands in
    ``stdout``/``stderr``.  Failures inside the child give ``ok=False``; misuse raises SandboxError.
    """
    payload_json = _validate(target, payload)
    rundir = Path(tempfile.mkdtemp(prefix="mt-sandbox-run-"))
    private_tmp = Path(tempfile.mkdtemp(prefix="mt-sandbox-tmp-"))
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    linux.libc()  # load before fork: the preexec_fn must not dlopen
    try:
        env, dropped = build_env(policy, private_tmp)
        append = [] if self_root_on_default_path() else [str(self_import_root())]
        hide = _hidden_dirs(policy)
        config = {
            "target": target,
            "result_fd": write_fd,
            "rules": compile_rules(policy, private_tmp),
            "network": policy.network,
            "parent_netns": linux.net_namespace(),
            "host_devs": {p: linux.device_id(p) for p in ("/dev/shm", *hide)},
            "sys_path": [str(p) for p in child_sys_path(policy)],
            "sys_path_append": append,
            "env_dropped": dropped,
            "rlimits": _rlimits(policy),
        }
        config_path = rundir / "config.json"
        config_path.write_text(f'{json.dumps(config)[:-1]}, "payload": {payload_json}}}', encoding="utf-8")
        cwd = policy.cwd or (policy.writable[0] if policy.writable else private_tmp)
        if not Path(cwd).is_dir():
            raise SandboxError(f"cwd {cwd} is not an existing directory")
        sink: list[bytes] = []
        with (
            config_path.open("rb") as stdin,
            (rundir / "stdout").open("wb") as stdout,
            (rundir / "stderr").open("wb") as stderr,
        ):
            proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-B", str(CHILD_SCRIPT)],
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=cwd,
                pass_fds=(write_fd,),
                start_new_session=True,
                preexec_fn=functools.partial(
                    _preexec, _rlimits(policy), not policy.network, policy.shm_bytes, hide
                ),
            )
        os.close(write_fd)
        write_fd = -1
        reader = threading.Thread(target=_drain, args=(read_fd, sink), daemon=True)
        read_fd = -1
        reader.start()
        timed_out = False
        try:
            code = proc.wait(timeout=policy.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            _killpg(proc.pid)
            code = proc.wait()
        _killpg(proc.pid)  # leftovers the code started in its process group
        reader.join(timeout=5)
        wall = time.monotonic() - start
        return _result(
            _messages(b"".join(sink)),
            code,
            timed_out,
            policy,
            wall,
            _read_capped(rundir / "stdout"),
            _read_capped(rundir / "stderr"),
        )
    finally:
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(rundir, ignore_errors=True)
        shutil.rmtree(private_tmp, ignore_errors=True)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _result(
    messages: dict[str, dict[str, Any]],
    code: int,
    timed_out: bool,
    policy: SandboxPolicy,
    wall: float,
    stdout: str,
    stderr: str,
) -> SandboxResult:
    isolation = dict(messages.get("isolation", {}).get("isolation", {}))
    if not isolation:
        isolation = {"applied": False, "level": "unknown", "host": isolation_report()}
    final = messages.get("result")
    ok = final is not None and final.get("ok") is True and code == 0 and not timed_out
    error: str | None = None
    if timed_out:
        error = f"timed out after {policy.wall_seconds:g}s"
    elif final is not None and not final.get("ok"):
        error = str(final.get("error"))
    elif code < 0:
        error = _signal_error(code)
    elif final is None:
        error = f"child exited with code {code} without a result"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        if tail:
            error += f": {tail[0]}"
    elif not ok:
        error = f"child exited with code {code}"
    value = final.get("value") if ok and final is not None else None
    return SandboxResult(ok, value, error, code, stdout, stderr, round(wall, 3), isolation, timed_out)
