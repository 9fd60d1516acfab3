"""A run directory: ``runs/<run_id>/`` with the trajectory, manifest, workspace, job and result."""

from __future__ import annotations

import json
import os
import platform
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs


def new_run_id(family: str) -> str:
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{family}-{uuid.uuid4().hex[:6]}"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if attrs.has(type(value)):
        return attrs.asdict(value)
    return str(value)


@attrs.define
class RunDir:
    """Writes a run's artifacts; every file is JSON or JSON lines."""

    path: Path

    def __attrs_post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=False)

    @property
    def workspace(self) -> Path:
        return self.path / "workspace"

    def log_turn(self, record: dict[str, Any]) -> None:
        """Append one trajectory record (flushed and fsynced: a killed episode keeps its history)."""
        record = {"ts": datetime.now().astimezone().isoformat(), **record}
        with (self.path / "trajectory.jsonl").open("a") as fh:
            fh.write(json.dumps(record, default=_json_default) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def write_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
        tmp.replace(path)
        return path


def environment_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in (
        "metatrain",
        "metatrain-families",
        "metatrain-reward",
        "torch",
        "transformers",
        "trl",
        "verifiers",
        "datasets",
        "peft",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
