"""Append-only JSON-lines cost ledgers, safe under concurrent writers (flock + fsync)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from metatrain.specs import CostRecord


def append_cost(path: Path, record: CostRecord) -> None:
    """Append one record; the line is written whole under an exclusive lock and fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (record.model_dump_json() + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_costs(path: Path) -> list[CostRecord]:
    if not path.exists():
        return []
    return [CostRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
