"""The agent's workspace: a directory the agent's file tools cannot leave."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import attrs


class WorkspaceError(Exception):
    """A refused file operation; the message goes back to the agent."""


@attrs.define
class Workspace:
    """File operations confined to ``root``: no absolute paths, no ``..``, no symlinks, size limits."""

    root: Path
    max_file_bytes: int = 256 * 1024
    max_files: int = 64
    max_total_bytes: int = 4 * 1024 * 1024

    def __attrs_post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root = self.root.resolve()

    def resolve(self, rel: str) -> Path:
        """Map a workspace-relative path to a real path inside ``root`` or refuse it."""
        if not isinstance(rel, str) or not rel.strip():
            raise WorkspaceError("path must be a non-empty string")
        if "\x00" in rel or "\\" in rel:
            raise WorkspaceError(f"path {rel!r} contains a forbidden character")
        pure = PurePosixPath(rel)
        if pure.is_absolute():
            raise WorkspaceError(f"path {rel!r} is absolute; use a path relative to the workspace")
        if any(part == ".." for part in pure.parts):
            raise WorkspaceError(f"path {rel!r} contains '..'; paths must stay inside the workspace")
        parts = [p for p in pure.parts if p != "."]
        if not parts:
            raise WorkspaceError(f"path {rel!r} names the workspace itself")
        current = self.root
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise WorkspaceError(f"path {rel!r} goes through a symlink; symlinks are not allowed")
        if not str(current.resolve()).startswith(str(self.root) + os.sep):
            raise WorkspaceError(f"path {rel!r} resolves outside the workspace")
        return current

    def read(self, rel: str) -> str:
        path = self.resolve(rel)
        if not path.is_file():
            raise WorkspaceError(f"no such file: {rel}")
        if path.stat().st_size > self.max_file_bytes:
            raise WorkspaceError(f"{rel} is larger than {self.max_file_bytes} bytes")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(f"{rel} is not UTF-8 text") from exc

    def write(self, rel: str, content: str) -> int:
        if not isinstance(content, str):
            raise WorkspaceError("content must be a string")
        data = content.encode("utf-8")
        if len(data) > self.max_file_bytes:
            raise WorkspaceError(f"content is {len(data)} bytes; the limit per file is {self.max_file_bytes}")
        path = self.resolve(rel)
        existing = self.files()
        if path not in existing and len(existing) >= self.max_files:
            raise WorkspaceError(f"the workspace already holds {self.max_files} files (the limit)")
        total = sum(p.stat().st_size for p in existing if p != path) + len(data)
        if total > self.max_total_bytes:
            raise WorkspaceError(
                f"the workspace would hold {total} bytes; the limit is {self.max_total_bytes}"
            )
        if path.is_dir():
            raise WorkspaceError(f"{rel} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp-write")
        tmp.write_bytes(data)
        tmp.replace(path)
        return len(data)

    def edit(self, rel: str, old: str, new: str) -> int:
        """Replace the single occurrence of ``old`` with ``new``."""
        text = self.read(rel)
        if not old:
            raise WorkspaceError("old_text must be non-empty")
        count = text.count(old)
        if count == 0:
            raise WorkspaceError(f"old_text was not found in {rel}")
        if count > 1:
            raise WorkspaceError(
                f"old_text occurs {count} times in {rel}; include more context to make it unique"
            )
        return self.write(rel, text.replace(old, new, 1))

    def files(self) -> list[Path]:
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out.extend(Path(dirpath) / f for f in filenames)
        return sorted(out)

    def listing(self) -> list[tuple[str, int]]:
        return [(str(p.relative_to(self.root)), p.stat().st_size) for p in self.files() if not p.is_symlink()]
