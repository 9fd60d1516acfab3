"""Gzipped tars of job bundles and result directories, packed and unpacked defensively.

Unpacking accepts only regular files and directories with relative names inside the destination:
absolute paths, ``..``, symlinks, hard links, devices, duplicates and oversized archives are refused
with an ``ArchiveError`` that names the offending member.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO

MiB = 1024**2


class ArchiveError(ValueError):
    """An archive that is malformed or unsafe to unpack."""


BUNDLE_TOP = frozenset({"bundle.json", "workspace"})
"""The only top-level entries of a bundle archive."""


def pack_dir(root: Path, out: IO[bytes], keep: Callable[[PurePosixPath], bool] = lambda rel: True) -> int:
    """Write ``root``'s regular files whose relative path passes ``keep`` to ``out`` as tar.gz.

    Refuses symlinks; returns the number of files written.
    """
    count = 0
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar:  # weights barely compress
        for path in sorted(root.rglob("*")):
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if not keep(rel):
                continue
            if path.is_symlink():
                raise ArchiveError(f"refusing to pack symlink {rel}")
            if not path.is_file():
                continue
            stat = path.stat()
            info = tarfile.TarInfo(str(rel))
            info.size, info.mode, info.mtime = stat.st_size, 0o644, int(stat.st_mtime)
            with path.open("rb") as fh:
                tar.addfile(info, fh)
            count += 1
    return count


def pack_bundle(bundle_dir: Path) -> bytes:
    """A job bundle directory (``bundle.json`` + ``workspace/``) as tar.gz bytes."""
    if not (bundle_dir / "bundle.json").is_file():
        raise ArchiveError(f"{bundle_dir} is not a job bundle: bundle.json is missing")
    buf = io.BytesIO()
    pack_dir(bundle_dir, buf, keep=lambda rel: rel.parts[0] in BUNDLE_TOP and "__pycache__" not in rel.parts)
    return buf.getvalue()


def member_path(name: str) -> PurePosixPath | None:
    """The safe relative path of a member name (None for the archive root ``.``)."""
    if "\\" in name or "\x00" in name:
        raise ArchiveError(f"unsafe member name {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise ArchiveError(f"absolute path in archive: {name!r}")
    parts = [p for p in path.parts if p != "."]
    if ".." in parts:
        raise ArchiveError(f"path traversal in archive: {name!r}")
    return PurePosixPath(*parts) if parts else None


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fh = tar.extractfile(member)
    assert fh is not None
    with target.open("xb") as out:
        while chunk := fh.read(MiB):
            out.write(chunk)


def unpack(
    src: IO[bytes],
    dest: Path,
    *,
    max_bytes: int,
    max_members: int = 20_000,
    allowed_top: frozenset[str] | None = None,
) -> list[PurePosixPath]:
    """Unpack tar.gz ``src`` into ``dest`` (created; existing files are never overwritten).

    Returns the files written.
    """
    dest.mkdir(parents=True, exist_ok=True)
    total, seen, written = 0, set[PurePosixPath](), []
    try:
        with tarfile.open(fileobj=src, mode="r|gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > max_members:
                    raise ArchiveError(f"archive has more than {max_members} members")
                rel = member_path(member.name)
                if rel is None:
                    continue
                if allowed_top is not None and rel.parts[0] not in allowed_top:
                    raise ArchiveError(
                        f"unexpected member {member.name!r}: the archive must hold only {sorted(allowed_top)}"
                    )
                if not (member.isreg() or member.isdir()):
                    raise ArchiveError(f"member {member.name!r} is a link or special file")
                if rel in seen:
                    raise ArchiveError(f"duplicate member {member.name!r}")
                seen.add(rel)
                if member.isreg():
                    total += member.size
                    if total > max_bytes:
                        raise ArchiveError(f"archive unpacks to more than {max_bytes / MiB:g} MiB")
                try:
                    _extract(tar, member, dest.joinpath(*rel.parts))
                except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
                    raise ArchiveError(f"member {member.name!r} clashes with another member") from exc
                if member.isreg():
                    written.append(rel)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"not a readable tar.gz archive: {type(exc).__name__}: {exc}") from exc
    return written
