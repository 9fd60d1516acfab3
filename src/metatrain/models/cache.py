"""The local model cache: where prepared models live and whether one is complete (no torch import)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from metatrain.models.embedded import EmbeddedModel, get_model
from metatrain.models.templates import template_sha256

MANIFEST = "metatrain_model.json"
FORMAT_VERSION = 1
REQUIRED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
MANIFEST_KEYS = (
    "format_version",
    "key",
    "packages",
    "gguf_sha256",
    "transformers_version",
    "dtype",
    "n_params",
    "created",
    "template_style",
    "template_sha256",
)


def metatrain_home() -> Path:
    """``$METATRAIN_HOME``, default ``~/.cache/metatrain`` (read on every call)."""
    env = os.environ.get("METATRAIN_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "metatrain"


def models_home() -> Path:
    """The directory holding prepared models: ``$METATRAIN_HOME/models``."""
    return metatrain_home() / "models"


def model_dir(key: str) -> Path:
    """Where model ``key`` is (or will be) prepared."""
    return models_home() / key


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of a prepared model directory, or None if absent or unreadable."""
    try:
        data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(model: EmbeddedModel, path: Path) -> bool:
    """True if ``path`` holds a finished conversion of ``model`` with the current chat template."""
    manifest = read_manifest(path)
    if manifest is None or any(k not in manifest for k in MANIFEST_KEYS):
        return False
    if manifest["format_version"] != FORMAT_VERSION or manifest["key"] != model.key:
        return False
    if manifest["template_sha256"] != template_sha256(model.template_style):
        return False
    if model.sha256 is not None and manifest["gguf_sha256"] != model.sha256:
        return False
    has_weights = (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file()
    return has_weights and all((path / name).is_file() for name in REQUIRED_FILES)


@attrs.frozen
class ModelStatus:
    """Whether a model is prepared, where, how big, and whether its packages are installed."""

    key: str
    prepared: bool
    path: Path
    size_bytes: int
    packages_installed: bool


def dir_size(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 if it does not exist)."""
    if not path.is_dir():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def model_status(key: str) -> ModelStatus:
    """The cache state of model ``key`` (KeyError for an unknown key)."""
    from metatrain.models.sources import missing_packages

    model = get_model(key)
    path = model_dir(key)
    prepared = is_complete(model, path)
    return ModelStatus(
        key=key,
        prepared=prepared,
        path=path,
        size_bytes=dir_size(path) if prepared else 0,
        packages_installed=not missing_packages(model),
    )
