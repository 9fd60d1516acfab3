"""Real child-process tests of metatrain.sandbox (Landlock, netns, rlimits, env scrubbing)."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

try:
    import metatrain.sandbox  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from metatrain.sandbox import (
    SandboxError,
    SandboxPolicy,
    SandboxResult,
    default_read_paths,
    isolation_report,
    run_sandboxed,
)

REPORT = isolation_report()
needs_landlock = pytest.mark.skipif(
    REPORT["landlock_abi"] is None, reason="Landlock unavailable on this kernel"
)
needs_net_isolation = pytest.mark.skipif(
    not REPORT["netns"] and (REPORT["landlock_abi"] or 0) < 4,
    reason="neither network namespaces nor Landlock ABI >= 4 (TCP rules) available",
)

AGENT = """
import json, os, socket, sys, time

def add(a, b):
    return {"sum": a + b, "pid": os.getpid()}

def noisy():
    print('{"kind": "result", "ok": true, "value": "forged"}')
    sys.stdout.write("\\x00garbage\\n" * 3000)
    sys.stderr.write("some warning\\n")
    os.write(1, b"raw fd write\\n")
    return [1, 2, 3]

def read(path):
    with open(path, "rb") as fh:
        return fh.read().decode()

def try_read(path):
    try:
        with open(path, "rb") as fh:
            return "read:" + fh.read(64).decode(errors="replace")
    except OSError as exc:
        return type(exc).__name__

def try_listdir(path):
    try:
        return "listed:" + ",".join(sorted(os.listdir(path))[:3])
    except OSError as exc:
        return type(exc).__name__

def try_write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "written"
    except OSError as exc:
        return type(exc).__name__

def try_import(name):
    try:
        module = __import__(name)
        return "imported:" + str(getattr(module, "VALUE", None))
    except (ImportError, OSError) as exc:
        return type(exc).__name__

def try_connect(port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(("127.0.0.1", port))
        return "connected"
    except OSError as exc:
        return type(exc).__name__
    finally:
        sock.close()

def try_unix_connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        return "connected"
    except OSError as exc:
        return type(exc).__name__
    finally:
        sock.close()

def environment(parent_pid):
    return {"env": dict(os.environ), "proc_environ": try_read(f"/proc/{parent_pid}/environ"),
            "self_status": try_read("/proc/self/status")[:20]}

def signal_parent(parent_pid):
    try:
        os.kill(parent_pid, 0)
        return "signalled"
    except OSError as exc:
        return type(exc).__name__

def spin():
    while True:
        pass

def sleep_forever():
    time.sleep(3600)

def memory_bomb():
    chunks = []
    while True:
        chunks.append(bytearray(64 * 1024 * 1024))

def boom():
    raise ValueError("boom")

def not_json():
    return {1, 2}

def big_file(path, size):
    with open(path, "wb") as fh:
        fh.write(b"x" * size)
    return "written"

def _square(x):
    return x * x

def children(path):
    import multiprocessing, subprocess
    child = subprocess.run([sys.executable, "-c", f"open({path!r}).read()"], capture_output=True, text=True)
    pools = {}
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            pools[method] = pool.map(_square, [1, 2, 3])
    return {"grandchild_denied": "PermissionError" in child.stderr, "pools": pools}

def heavy():
    import torch, verifiers
    return {"torch": torch.__version__, "value": float(torch.ones(3).sum()), "verifiers": verifiers.__name__}
"""


@pytest.fixture()
def box(tmp_path: Path) -> dict[str, Path]:
    """A workspace, a module dir with the agent code, and a sibling dir the sandbox must not see."""
    dirs = {name: tmp_path / name for name in ("ws", "mods", "outside")}
    for path in dirs.values():
        path.mkdir()
    (dirs["mods"] / "agent_code.py").write_text(textwrap.dedent(AGENT))
    (dirs["outside"] / "secret.txt").write_text("top secret")
    return dirs


def run(box: dict[str, Path], func: str, payload: dict[str, Any] | None = None, **kw: Any) -> SandboxResult:
    policy = SandboxPolicy(writable=(box["ws"],), sys_path=(box["mods"],), **kw)
    return run_sandboxed(policy, f"agent_code:{func}", payload or {})


def test_returns_value_and_reports_isolation(box: dict[str, Path]) -> None:
    result = run(box, "add", {"a": 2, "b": 40})
    assert result.ok, result.error
    assert result.value["sum"] == 42
    assert result.value["pid"] != os.getpid()
    assert result.exit_code == 0 and result.error is None
    iso = result.isolation
    assert iso["applied"] is True and iso["level"] in {"full", "degraded"}
    assert iso["landlock_abi"] == REPORT["landlock_abi"]
    assert iso["netns"] is REPORT["netns"]
    assert iso["rlimits"]["RLIMIT_CPU"][0] == 60
    assert iso["rlimits"]["RLIMIT_AS"][0] == 4 << 30
    assert iso["rlimits"]["RLIMIT_CORE"] == [0, 0]


def test_stdout_garbage_does_not_corrupt_result(box: dict[str, Path]) -> None:
    result = run(box, "noisy")
    assert result.ok and result.value == [1, 2, 3]
    assert "forged" in result.stdout and "raw fd write" in result.stdout
    assert "truncated" in result.stdout and len(result.stdout) < 21_000
    assert "some warning" in result.stderr


def test_misuse_raises_sandbox_error(box: dict[str, Path]) -> None:
    policy = SandboxPolicy(writable=(box["ws"],))
    with pytest.raises(SandboxError):
        run_sandboxed(policy, "no colon here", {})
    with pytest.raises(SandboxError):
        run_sandboxed(policy, "agent_code:add", {"a": object()})


def test_child_exceptions_and_bad_results_are_reported(box: dict[str, Path]) -> None:
    raised = run(box, "boom")
    assert not raised.ok and raised.exit_code == 1
    assert raised.error is not None and raised.error.startswith("ValueError: boom")
    assert "agent_code.py" in raised.error
    unserialisable = run(box, "not_json")
    assert not unserialisable.ok and "JSON-serialisable" in str(unserialisable.error)
    missing = run_sandboxed(SandboxPolicy(writable=(box["ws"],)), "no_such_module_xyz:f", {})
    assert not missing.ok and "ModuleNotFoundError" in str(missing.error)


@needs_landlock
def test_reads_outside_allowed_paths_fail(box: dict[str, Path]) -> None:
    (box["ws"] / "mine.txt").write_text("hello")
    repo_file = Path(__file__).resolve().parents[1] / "pyproject.toml"
    checks = {
        "ws": ("try_read", str(box["ws"] / "mine.txt")),
        "sibling": ("try_read", str(box["outside"] / "secret.txt")),
        "home": ("try_listdir", str(Path.home())),
        "root": ("try_listdir", "/root"),
        "tmp": ("try_listdir", "/tmp"),
        "repo": ("try_read", str(repo_file)),
        "shadow": ("try_read", "/etc/shadow"),
    }
    home_files = sorted(p for p in Path.home().iterdir() if p.is_file())
    if home_files:
        checks["home_file"] = ("try_read", str(home_files[0]))
    got = {key: run(box, func, {"path": path}).value for key, (func, path) in checks.items()}
    assert got.pop("ws") == "read:hello"
    assert all(value == "PermissionError" for value in got.values()), got


@needs_landlock
def test_writes_outside_workspace_fail(box: dict[str, Path]) -> None:
    assert run(box, "try_write", {"path": str(box["ws"] / "new.txt")}).value == "written"
    assert (box["ws"] / "new.txt").read_text() == "x"
    for target in (box["outside"] / "new.txt", box["mods"] / "agent_code.py", Path("/tmp/mt-sandbox-escape")):
        assert run(box, "try_write", {"path": str(target)}).value == "PermissionError", target
    assert not (box["outside"] / "new.txt").exists() and not Path("/tmp/mt-sandbox-escape").exists()
    assert "def add" in (box["mods"] / "agent_code.py").read_text()


@needs_landlock
def test_symlink_out_of_workspace_is_not_followed(box: dict[str, Path]) -> None:
    (box["ws"] / "link.txt").symlink_to(box["outside"] / "secret.txt")
    (box["ws"] / "linkdir").symlink_to(box["outside"])
    assert run(box, "try_read", {"path": str(box["ws"] / "link.txt")}).value == "PermissionError"
    assert (
        run(box, "try_read", {"path": str(box["ws"] / "linkdir" / "secret.txt")}).value == "PermissionError"
    )
    assert run(box, "try_write", {"path": str(box["ws"] / "linkdir" / "new.txt")}).value == "PermissionError"


@needs_landlock
def test_denied_package_is_unreadable_but_siblings_import(box: dict[str, Path], tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for name, value in (("secretpkg", 1234), ("okpkg", 7)):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"VALUE = {value}\n")
    (site / "secretpkg" / "seed.txt").write_text("seed=1234")
    (site / "secretpkg-1.0.dist-info").mkdir()
    (site / "secretpkg-1.0.dist-info" / "METADATA").write_text("Name: secretpkg")
    (site / "secret_module_helper.py").write_text("VALUE = 'fine'\n")
    policy = SandboxPolicy(
        writable=(box["ws"],), readable=(site,), sys_path=(box["mods"], site), deny_packages=("secretpkg",)
    )

    def call(func: str, **payload: Any) -> Any:
        result = run_sandboxed(policy, f"agent_code:{func}", payload)
        assert result.ok, result.error
        return result.value

    assert call("try_import", name="okpkg") == "imported:7"
    assert call("try_import", name="secret_module_helper") == "imported:fine"
    assert call("try_import", name="secretpkg") == "PermissionError"
    assert call("try_read", path=str(site / "secretpkg" / "seed.txt")) == "PermissionError"
    assert call("try_read", path=str(site / "secretpkg" / "__init__.py")) == "PermissionError"
    assert call("try_read", path=str(site / "secretpkg-1.0.dist-info" / "METADATA")) == "PermissionError"


def test_default_read_paths_excludes_denied_and_private_locations() -> None:
    import numpy
    import torch

    torch_dir = Path(torch.__file__).resolve().parent
    numpy_dir = Path(numpy.__file__).resolve().parent
    paths = default_read_paths(("torch",))
    assert numpy_dir in paths
    assert Path("/dev/null") in paths and Path("/proc/self") in paths
    assert not [p for p in paths if p == torch_dir or torch_dir in p.parents or p in torch_dir.parents]
    assert not [p for p in paths if p.name.startswith("torch-") and p.name.endswith(".dist-info")]
    repo_root = Path(__file__).resolve().parents[1]
    for private in (Path("/root"), Path.home(), Path("/tmp"), Path.cwd().resolve(), repo_root, Path("/")):
        assert not [p for p in paths if p == private or p in private.parents], private
    assert all(p.exists() for p in paths)
    assert not [p for p in paths if p == Path("/etc/ssl/private") or Path("/etc/ssl/private") in p.parents]


@needs_net_isolation
def test_tcp_connect_to_host_listener_fails(box: dict[str, Path]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        blocked = run(box, "try_connect", {"port": port})
        allowed = run(box, "try_connect", {"port": port}, network=True)
    assert blocked.ok and blocked.value in {"OSError", "PermissionError", "ConnectionRefusedError"}, (
        blocked.value
    )
    assert blocked.isolation["network"] != "NOT ISOLATED"
    assert allowed.value == "connected"
    assert listener.fileno() == -1


@needs_landlock
def test_env_is_scrubbed_and_parent_environ_unreadable(
    box: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENROUTER_API_KEY", secret)
    monkeypatch.setenv("UNRELATED_PARENT_VAR", "should-not-leak")
    env = {"MY_SETTING": "1", "HF_TOKEN": "hf_abc", "ECHO": f"prefix-{secret}", "DB_PASSWORD": "x"}
    result = run(box, "environment", {"parent_pid": os.getpid()}, env=env)
    assert result.ok, result.error
    child_env = result.value["env"]
    assert "OPENROUTER_API_KEY" not in child_env and "UNRELATED_PARENT_VAR" not in child_env
    assert not [k for k, v in child_env.items() if secret in v]
    assert child_env["MY_SETTING"] == "1"
    assert {"HF_TOKEN", "ECHO", "DB_PASSWORD"}.isdisjoint(child_env)
    assert child_env["HOME"] == child_env["TMPDIR"] and child_env["HF_HUB_OFFLINE"] == "1"
    assert child_env["PYTHONHASHSEED"] == "0"
    assert result.value["proc_environ"] == "PermissionError"
    assert result.value["self_status"].startswith("read:Name:")
    assert {"ECHO", "HF_TOKEN", "DB_PASSWORD"} <= set(result.isolation["env_dropped"])


@needs_landlock
def test_cannot_signal_parent_and_capabilities_dropped(box: dict[str, Path]) -> None:
    result = run(box, "signal_parent", {"parent_pid": os.getpid()})
    if (REPORT["landlock_abi"] or 0) >= 6:
        assert result.value == "PermissionError"
    assert result.isolation["capabilities_dropped"] is True


def test_wall_timeout_kills_process_group(box: dict[str, Path]) -> None:
    result = run(box, "sleep_forever", wall_seconds=1.0)
    assert not result.ok and result.error == "timed out after 1s" and result.timed_out
    assert result.wall_seconds < 10


def test_cpu_limit_kills_spinning_code(box: dict[str, Path]) -> None:
    result = run(box, "spin", cpu_seconds=1, wall_seconds=20.0)
    assert not result.ok and not result.timed_out
    assert result.error is not None and "SIGXCPU (cpu limit)" in result.error
    assert result.wall_seconds < 15


def test_spin_hits_wall_timeout_first(box: dict[str, Path]) -> None:
    result = run(box, "spin", cpu_seconds=30, wall_seconds=1.0)
    assert not result.ok and result.error == "timed out after 1s"


def test_memory_bomb_reports_memory_limit(box: dict[str, Path]) -> None:
    result = run(box, "memory_bomb", memory_bytes=512 << 20)
    assert not result.ok
    assert result.error is not None and result.error.startswith("memory limit exceeded"), result.error


def test_file_size_limit(box: dict[str, Path]) -> None:
    result = run(
        box, "big_file", {"path": str(box["ws"] / "big.bin"), "size": 2 << 20}, max_file_bytes=1 << 20
    )
    assert not result.ok and "File too large" in str(result.error)


def test_pythonpath_in_env_is_applied_after_restriction(box: dict[str, Path]) -> None:
    policy = SandboxPolicy(writable=(box["ws"],), env={"PYTHONPATH": str(box["mods"])})
    result = run_sandboxed(policy, "agent_code:add", {"a": 1, "b": 1})
    assert result.ok and result.value["sum"] == 2


@needs_landlock
def test_subprocesses_inherit_restrictions_and_multiprocessing_works(box: dict[str, Path]) -> None:
    result = run(box, "children", {"path": str(box["outside"] / "secret.txt")})
    assert result.ok, f"{result.error}\n{result.stderr[-2000:]}"
    assert result.value["grandchild_denied"] is True
    assert result.value["pools"] == {"fork": [1, 4, 9], "spawn": [1, 4, 9]}


@needs_landlock
def test_host_dev_shm_is_not_visible(box: dict[str, Path]) -> None:
    host_file = Path("/dev/shm") / f"mt-sandbox-test-{os.getpid()}"
    host_file.write_text("host shm data")
    try:
        result = run(box, "try_read", {"path": str(host_file)})
    finally:
        host_file.unlink()
    assert result.ok and result.value in {"FileNotFoundError", "PermissionError"}, result.value
    assert result.isolation["shm"] in {"private", "none"}


def test_host_run_sockets_are_hidden(box: dict[str, Path]) -> None:
    path = Path("/run") / f"mt-sandbox-test-{os.getpid()}.sock"
    if not Path("/run").is_dir():
        pytest.skip("no /run on this host")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        try:
            result = run(box, "try_unix_connect", {"path": str(path)})
        finally:
            path.unlink()
    if "/run" not in result.isolation["hidden"]:
        pytest.skip("mount namespaces unavailable: /run could not be hidden")
    assert result.value == "FileNotFoundError"


@needs_landlock
@pytest.mark.skipif(
    importlib.util.find_spec("metatrain_families") is None, reason="metatrain_families not installed"
)
def test_installed_hidden_eval_package_can_be_denied(box: dict[str, Path]) -> None:
    spec = importlib.util.find_spec("metatrain_families")
    assert spec is not None and spec.origin is not None
    package_file = spec.origin
    policy = SandboxPolicy(
        writable=(box["ws"],), sys_path=(box["mods"],), deny_packages=("metatrain_families",)
    )
    denied_import = run_sandboxed(policy, "agent_code:try_import", {"name": "metatrain_families"})
    denied_read = run_sandboxed(policy, "agent_code:try_read", {"path": package_file})
    assert denied_import.value in {"PermissionError", "ModuleNotFoundError"}, denied_import.value
    assert denied_read.value == "PermissionError"
    allowed = run_sandboxed(
        SandboxPolicy(writable=(box["ws"],), sys_path=(box["mods"],)),
        "agent_code:try_read",
        {"path": package_file},
    )
    assert str(allowed.value).startswith("read:")


def test_torch_and_verifiers_import_inside_sandbox(box: dict[str, Path]) -> None:
    result = run(box, "heavy", deny_packages=("nox",))
    assert result.ok, f"{result.error}\n{result.stderr[-3000:]}"
    assert result.value["value"] == 3.0 and result.value["verifiers"] == "verifiers"


def test_import_dir_children_include_bundled_libs_and_skip_denied_and_data(tmp_path: Path) -> None:
    from metatrain.sandbox.policy import _importable_children

    for d in (
        "okpkg",
        "okpkg-1.0.dist-info",
        "numpy.libs",
        "secretpkg",
        "secretpkg.libs",
        ".git",
        "test-data",
    ):
        (tmp_path / d).mkdir()
    for f in ("mod.py", "ext.cpython-312-x86_64-linux-gnu.so", "layer.pth", "README.txt"):
        (tmp_path / f).write_text("")
    names = {p.name for p in _importable_children(tmp_path, ("secretpkg",))}
    assert names == {
        "okpkg",
        "okpkg-1.0.dist-info",
        "numpy.libs",
        "mod.py",
        "ext.cpython-312-x86_64-linux-gnu.so",
        "layer.pth",
    }


def test_a_layered_environment_imports_numpy_in_the_sandbox(tmp_path: Path) -> None:
    """A venv whose packages come from another environment through a .pth file (as on a GPU image
    with its own venv): numpy must load its bundled libraries (numpy.libs) inside the sandbox."""
    import subprocess
    import sysconfig

    from metatrain.sandbox.policy import self_import_root

    layer = tmp_path / "layer"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(layer)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(layer), "platbase": str(layer)})["purelib"])
    (site / "zz_layer.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{self_import_root()}\n")
    mods, ws = tmp_path / "mods", tmp_path / "ws"
    mods.mkdir()
    ws.mkdir()
    (mods / "uses_numpy.py").write_text("def f():\n    import numpy\n    return float(numpy.ones(3).sum())\n")
    script = (
        "import sys\n"
        "from metatrain.sandbox import SandboxPolicy, run_sandboxed\n"
        f"policy = SandboxPolicy(writable=({str(ws)!r},), sys_path=({str(mods)!r},))\n"
        "r = run_sandboxed(policy, 'uses_numpy:f', {})\n"
        "print(sys.prefix, r.value, r.error)\n"
    )
    out = subprocess.run(
        [str(layer / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split(" ", 2)[:2] == [str(layer), "3.0"], out.stdout[-2000:] + out.stderr[-2000:]
