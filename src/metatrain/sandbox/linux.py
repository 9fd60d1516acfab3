"""Namespaces and capabilities via ctypes (standard library only; loaded by the child)."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 1 << 18

PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each with its lock bit.
SECURE_BITS_LOCKED = 0b11101111
CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


@functools.cache
def libc() -> ctypes.CDLL:
    """libc, loaded once (call it before fork so a preexec_fn never runs dlopen)."""
    return ctypes.CDLL(None, use_errno=True)


def unshare_network() -> str:
    """Move this process into a new, empty network namespace.

    Tries CLONE_NEWNET, then CLONE_NEWUSER|CLONE_NEWNET on EPERM (needs a single-threaded
    process, e.g. a preexec_fn).  Returns "netns", "userns+netns" or "" when both failed.
    """
    lib = libc()
    if lib.unshare(CLONE_NEWNET) == 0:
        return "netns"
    if ctypes.get_errno() == errno.EPERM and lib.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        return "userns+netns"
    return ""


def private_mounts(shm_bytes: int, hide: tuple[str, ...]) -> bool:
    """Enter a private mount namespace: fresh tmpfs on /dev/shm, empty read-only tmpfs over ``hide``.

    ``shm_bytes`` caps the /dev/shm tmpfs (0: leave /dev/shm alone).  Hiding e.g. /run keeps
    pathname UNIX sockets there (docker, dbus, databases) out of reach; Landlock ABI 7 does not
    cover connect() on them.  Nothing propagates to the host (mounts are made private first).
    Best effort: returns False when the namespace or a mount is not permitted.
    """
    lib = libc()
    if lib.unshare(CLONE_NEWNS) != 0:
        return False
    if lib.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    ok = True
    if shm_bytes > 0:
        options = f"size={shm_bytes},mode=1777".encode()
        ok = lib.mount(b"tmpfs", b"/dev/shm", b"tmpfs", flags, options) == 0
    for path in hide:
        if os.path.isdir(path):
            ok = (
                lib.mount(b"tmpfs", path.encode(), b"tmpfs", flags | MS_RDONLY, b"size=4k,mode=755") == 0
                and ok
            )
    return ok


def device_id(path: str) -> int | None:
    """st_dev of ``path`` (tells a private mount from the host's), or None if missing."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def net_namespace() -> str | None:
    """This process's network namespace id (e.g. "net:[4026531840]"), or None if unknown."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def capability_sets() -> dict[str, int]:
    """The Cap* lines of /proc/self/status as integers (empty if unreadable)."""
    sets: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(("CapEff:", "CapPrm:", "CapBnd:", "CapAmb:", "CapInh:")):
                    name, value = line.split(":", 1)
                    sets[name] = int(value.strip(), 16)
    except OSError:
        pass
    return sets


def drop_capabilities() -> bool:
    """Drop every capability (bounding, ambient, effective, permitted, inheritable) for good.

    Also locks SECBIT_NOROOT so an exec as uid 0 regains nothing.  Returns True when the
    process then holds no capabilities (checked via capget).
    """
    lib = libc()
    lib.prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKED, 0, 0, 0)  # best effort: needs CAP_SETPCAP
    for cap in range(64):  # stops at EINVAL: past the kernel's last capability
        if lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EPERM:
            break
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    lib.capset(ctypes.byref(header), data)
    check = (_CapData * 2)()
    if lib.capget(ctypes.byref(header), check) != 0:
        return False
    return all(d.effective == 0 and d.permitted == 0 and d.inheritable == 0 for d in check)


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (no orphaned agent code after a crash)."""
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
