"""Landlock (Linux LSM) filesystem/network restriction via ctypes.

Standard library only: the sandbox child loads this file before it restricts itself.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from typing import Any

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
MODES = {"ro": READ_ONLY, "ls": FS_READ_DIR, "rw": (1 << 64) - 1}
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class RulesetAttr(ctypes.Structure):
    """struct landlock_ruleset_attr (fields beyond the ABI's must stay zero)."""

    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class PathBeneathAttr(ctypes.Structure):
    """struct landlock_path_beneath_attr, packed: {u64 allowed_access; s32 parent_fd}."""

    _pack_ = 1
    _layout_ = "ms"  # keeps _pack_ meaningful (and warning-free) on Python >= 3.14
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class LandlockError(OSError):
    """A Landlock syscall failed on a kernel that supports Landlock."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int | None:
    """The kernel's Landlock ABI version, or None when Landlock is unavailable."""
    try:
        libc = _libc()
        abi = int(libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return None
    return abi if abi > 0 else None


def fs_mask(abi: int) -> int:
    """All filesystem rights the given ABI can handle."""
    mask = (1 << 13) - 1
    if abi >= 2:
        mask |= FS_REFER
    if abi >= 3:
        mask |= FS_TRUNCATE
    if abi >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def set_no_new_privs() -> None:
    """prctl(PR_SET_NO_NEW_PRIVS, 1): required before restrict_self without CAP_SYS_ADMIN."""
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


def restrict(rules: Iterable[tuple[str, str]], *, deny_tcp: bool) -> dict[str, Any]:
    """Restrict this process (and future children) to ``rules`` of (path, mode).

    Mode "ro" grants EXECUTE|READ_FILE|READ_DIR, "ls" only READ_DIR, "rw" every handled right
    (for a path that is not a directory, only the file rights among those).  Missing paths are
    skipped.  With ``deny_tcp`` and ABI >= 4, TCP bind/connect are handled with no rule, i.e.
    denied.  Returns a summary.
    Raises LandlockError when Landlock is unavailable or a syscall fails.
    """
    abi = abi_version()
    if abi is None:
        raise LandlockError("Landlock is not available on this kernel")
    libc = _libc()
    handled_fs = fs_mask(abi)
    attr = RulesetAttr(handled_fs, 0, 0)
    if deny_tcp and abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset_fd = int(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0))
    if ruleset_fd < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    added = 0
    skipped: list[str] = []
    try:
        for path, mode in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                skipped.append(path)
                continue
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                allowed = MODES[mode] & handled_fs
                if not is_dir:
                    allowed &= FILE_RIGHTS
                if not allowed:  # e.g. a list-only rule on a file: nothing to grant
                    continue
                rule = PathBeneathAttr(allowed, fd)
                if libc.syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule({path!r}): {os.strerror(err)}")
                added += 1
            finally:
                os.close(fd)
        set_no_new_privs()
        if libc.syscall(SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset_fd)
    return {
        "landlock_abi": abi,
        "handled_access_fs": handled_fs,
        "handled_access_net": int(attr.handled_access_net),
        "scoped": int(attr.scoped),
        "rules": added,
        "skipped": skipped,
    }
