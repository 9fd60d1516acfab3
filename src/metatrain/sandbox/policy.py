"""Sandbox policy and the filesystem paths a sandboxed Python needs to read."""

from __future__ import annotations

import ast
import glob
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

MiB = 1 << 20
GiB = 1 << 30

SYSTEM_READ_PATHS: tuple[str, ...] = (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/share/zoneinfo",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/ssl",  # minus /etc/ssl/private
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/os-release",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/proc/self",  # opened in the child, so it names the child's own /proc/<pid>
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/sys/kernel",
    "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/fs/cgroup",
    "/sys/kernel/mm/transparent_hugepage",
)
WRITABLE_DEVICES: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/full")
NEVER_READ: tuple[str, ...] = ("/etc/ssl/private",)
# /proc/self/task: CUDA names its threads (writes task/<tid>/comm) and fails to init otherwise.
GPU_WRITE_GLOBS: tuple[str, ...] = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/shm", "/proc/self/task")
GPU_READ_PATHS: tuple[str, ...] = (
    "/proc/driver/nvidia",
    "/proc/devices",
    "/proc/modules",
    "/sys/bus/pci",
    "/sys/devices",
    "/sys/module/nvidia",
    "/usr/local/cuda",
    "/usr/local/nvidia",
    # Triton (used by torch on CUDA) runs `ldconfig -p` to find libcuda and builds its launcher
    # with the system C compiler: the toolchain must be readable and executable.
    "/sbin/ldconfig",
    "/sbin/ldconfig.real",
    "/usr/sbin/ldconfig",
    "/usr/sbin/ldconfig.real",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/bin",
    "/usr/bin",
    "/usr/include",
    "/usr/libexec",
    "/usr/local/include",
)
_PSEUDO_FS = ("/proc/", "/dev/", "/sys/")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


def _to_paths(values: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    if isinstance(values, str | os.PathLike):
        values = (values,)
    return tuple(Path(v) for v in values)


def _to_names(values: Iterable[str]) -> tuple[str, ...]:
    names = (values,) if isinstance(values, str) else tuple(values)
    for name in names:
        if not _IDENTIFIER.match(name):
            raise ValueError(f"deny_packages entry {name!r} is not a top-level import name")
    return names


def _to_optional_path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


def _to_env(value: Mapping[str, str]) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


@attrs.frozen(kw_only=True)
class SandboxPolicy:
    """What a sandboxed call may touch and how long/large it may grow.

    ``sys_path`` entries (plus any ``PYTHONPATH`` in ``env``) are made readable and put at the
    front of the child's ``sys.path`` only *after* the restrictions apply, so code in them cannot
    run unrestricted or shadow the child's own stdlib imports.  ``shm_bytes`` caps the private
    tmpfs mounted on the child's /dev/shm (multiprocessing needs it); 0 disables it.
    """

    writable: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    readable: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    deny_packages: tuple[str, ...] = attrs.field(default=(), converter=_to_names)
    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    memory_bytes: int | None = 4 * GiB
    max_file_bytes: int = 256 * MiB
    max_open_files: int = 512
    network: bool = False
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_to_env, hash=False)
    cwd: Path | None = attrs.field(default=None, converter=_to_optional_path)
    allow_gpu: bool = False
    shm_bytes: int = 1 * GiB
    sys_path: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)

    def __attrs_post_init__(self) -> None:
        if self.wall_seconds <= 0 or self.cpu_seconds < 1 or self.max_open_files < 16:
            raise ValueError("wall_seconds, cpu_seconds and max_open_files must be positive (files >= 16)")
        if self.memory_bytes is not None and self.memory_bytes < 64 * MiB:
            raise ValueError("memory_bytes below 64 MiB cannot start Python")


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def is_denied_entry(name: str, denied: Iterable[str]) -> bool:
    """Whether a directory entry belongs to a denied top-level package.

    Matches ``pkg``, ``pkg.py``/``pkg.*.so``/``pkg.pth``/``pkg.*.pyc``, ``pkg-*.dist-info``,
    ``pkg-*.egg-info`` and setuptools' ``__editable__`` files for ``pkg``.
    """
    head = name.split(".", 1)[0]
    dist = _norm_dist(name.split("-", 1)[0]) if name.endswith((".dist-info", ".egg-info")) else None
    editable = _norm_dist(name[len("__editable__") :].lstrip("._")) if name.startswith("__editable__") else ""
    for pkg in denied:
        norm = _norm_dist(pkg)
        if head == pkg or dist == norm or (editable and editable.startswith(norm + "_")):
            return True
    return False


def site_dirs() -> list[Path]:
    """The interpreter's site-packages directories that exist."""
    candidates = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    return _unique(Path(c) for c in candidates if os.path.isdir(c))


def pth_dirs(site_dir: Path) -> list[Path]:
    """Directories that ``*.pth`` files in ``site_dir`` put on sys.path (editable installs)."""
    found: list[Path] = []
    for pth in sorted(site_dir.glob("*.pth")):
        try:
            lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            path = site_dir / line
            if path.is_dir():
                found.append(path)
    return found


def editable_mappings(site_dir: Path) -> dict[str, Path]:
    """``MAPPING`` of setuptools ``__editable__*_finder.py`` modules: import name -> source path."""
    mapping: dict[str, Path] = {}
    for finder in sorted(site_dir.glob("__editable__*finder.py")):
        try:
            tree = ast.parse(finder.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and node.targets else None
            if isinstance(node, ast.AnnAssign):
                target = node.target
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id == "MAPPING" and isinstance(value, ast.Dict):
                for key, val in zip(value.keys, value.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(val, ast.Constant):
                        mapping[str(key.value)] = Path(str(val.value))
    return mapping


def self_import_root() -> Path:
    """The sys.path entry that holds the ``metatrain`` package this module belongs to."""
    return Path(__file__).resolve().parents[2]


def import_dirs() -> list[Path]:
    """Non-site directories a fresh interpreter imports from: .pth entries, plus our own root."""
    dirs = [d for s in site_dirs() for d in pth_dirs(s)]
    return _unique([*dirs, self_import_root()])


def self_root_on_default_path() -> bool:
    """Whether ``import metatrain`` works in a fresh interpreter without extra sys.path."""
    root = self_import_root()
    sites = site_dirs()
    on_path = {_resolve(d) for s in sites for d in (s, *pth_dirs(s))}
    return root in on_path or any("metatrain" in editable_mappings(s) for s in sites)


def _python_paths() -> list[Path]:
    paths: list[Path] = []
    for prefix in _unique(
        Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    ):
        scheme = sysconfig.get_paths(
            vars={"base": prefix, "platbase": prefix, "installed_base": prefix, "installed_platbase": prefix}
        )
        paths += [Path(scheme["stdlib"]), Path(scheme["platstdlib"])]
    paths += [Path(sys.executable), Path(os.path.realpath(sys.executable)), Path(sys.prefix, "pyvenv.cfg")]
    libdir = sysconfig.get_config_var("LIBDIR")
    for var in ("LDLIBRARY", "INSTSONAME"):
        name = sysconfig.get_config_var(var)
        if libdir and name:
            paths.append(Path(libdir, name))
    return paths


def _importable_children(directory: Path, denied: Iterable[str]) -> list[Path]:
    """Entries of an import dir that Python imports or reads metadata from (no .git, no tests data).

    That includes auditwheel's ``<dist>.libs`` folders: numpy, scipy and others load their bundled
    shared libraries from there, so a site-packages reached through a ``.pth`` file (a layered
    environment) needs them readable.
    """
    out: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return out
    for entry in entries:
        name = entry.name
        if is_denied_entry(name, denied):
            continue
        if entry.is_dir():
            if _IDENTIFIER.match(name) or name.endswith((".dist-info", ".egg-info", ".libs")):
                out.append(entry)
        elif name.endswith((".py", ".so", ".pth")):
            out.append(entry)
    return out


def _resolve(path: Path) -> Path:
    return path if str(path).startswith(_PSEUDO_FS) else path.resolve()


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[Path] = set()
    out: list[Path] = []
    for path in paths:
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def denied_paths(deny_packages: Iterable[str], scan_dirs: Iterable[Path] = ()) -> set[Path]:
    """Resolved paths of denied packages in site dirs, import dirs and ``scan_dirs``."""
    denied = tuple(deny_packages)
    out = {_resolve(Path(p)) for p in NEVER_READ}
    if not denied:
        return out
    sites = site_dirs()
    for directory in _unique([*sites, *import_dirs(), *scan_dirs]):
        for sub in (directory, directory / "__pycache__"):
            try:
                names = os.listdir(sub)
            except OSError:
                continue
            out.update(_resolve(sub / n) for n in names if is_denied_entry(n, denied))
    for site_dir in sites:
        for name, path in editable_mappings(site_dir).items():
            if is_denied_entry(name, denied):
                out.add(_resolve(path))
    return out


def expand_excluding(path: Path, denied: set[Path], expanded: list[Path] | None = None) -> list[Path]:
    """``path`` itself, or (if a denied path lies beneath it) its allowed descendants.

    Directories replaced by their children are appended to ``expanded``: they still need a
    list-only rule, or Python's import system cannot scan them.
    """
    if str(path).startswith(_PSEUDO_FS):
        return [path]
    real = path.resolve()
    if real in denied or any(d in real.parents for d in denied):
        return []
    if not any(real in d.parents for d in denied):
        return [real]
    try:
        children = sorted(real.iterdir())
    except OSError:
        return []
    if expanded is not None:
        expanded.append(real)
    return [p for child in children for p in expand_excluding(child, denied, expanded)]


def _default_rules(deny_packages: tuple[str, ...], listing: list[Path]) -> list[Path]:
    denied = denied_paths(deny_packages)
    candidates: list[Path] = [*_python_paths(), *site_dirs()]
    for directory in import_dirs():
        listing.append(directory)
        candidates += _importable_children(directory, deny_packages)
    for site_dir in site_dirs():
        candidates += [
            p for n, p in editable_mappings(site_dir).items() if not is_denied_entry(n, deny_packages)
        ]
    candidates += [Path(p) for p in SYSTEM_READ_PATHS]
    existing = [p for p in _unique(candidates) if os.path.exists(p)]
    return _unique(p for c in existing for p in expand_excluding(c, denied, listing))


def default_read_paths(deny_packages: Iterable[str] = ()) -> tuple[Path, ...]:
    """Existing read-only paths Python, torch, transformers, datasets and verifiers need.

    Stdlib, interpreter, each site-packages entry, the importable entries of .pth/editable
    source dirs (and of this package's own source root), selected /usr, /etc, /dev, /proc, /sys
    paths.  Nothing at or below a denied package (or /etc/ssl/private) is covered: a covering
    directory is replaced by its allowed children (the sandbox may still list its names).
    """
    return tuple(_default_rules(_to_names(tuple(deny_packages)), []))


def compile_rules(policy: SandboxPolicy, private_tmp: Path) -> list[tuple[str, str]]:
    """Landlock rules (path, "ro" | "rw" | "ls") for ``policy`` plus the run's private tmp dir.

    "ls" (list-only) covers directories whose files are partly denied and import dirs, so
    Python's import system can scan them; their denied entries stay unreadable.
    """
    listing: list[Path] = []
    reads = _default_rules(policy.deny_packages, listing)
    extra_reads = [*policy.readable, *child_sys_path(policy)]
    denied = denied_paths(policy.deny_packages, [p for p in extra_reads if p.is_dir()])
    reads += [p for c in extra_reads if c.exists() for p in expand_excluding(c, denied, listing)]
    rules = [(str(p), "ls") for p in _unique(listing)]
    rules += [(str(p), "ro") for p in _unique(reads)]
    rules += [(p, "rw") for p in WRITABLE_DEVICES if os.path.exists(p)]
    if policy.allow_gpu:
        lib_dirs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        rules += [(p, "ro") for p in (*GPU_READ_PATHS, *lib_dirs) if os.path.exists(p)]
        rules += [(p, "rw") for pattern in GPU_WRITE_GLOBS for p in sorted(glob.glob(pattern))]
    rules += [(str(Path(p).resolve()), "rw") for p in (*policy.writable, private_tmp)]
    return rules


def child_sys_path(policy: SandboxPolicy) -> list[Path]:
    """Entries the child prepends to sys.path once restricted (policy.sys_path, env PYTHONPATH)."""
    extra = [Path(p) for p in policy.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return _unique([*policy.sys_path, *extra])
