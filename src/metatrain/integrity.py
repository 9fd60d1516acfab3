"""Eval integrity: which code agent-written jobs may not read, and the sandbox policies that run them."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from metatrain.sandbox import SandboxPolicy

GiB = 1024**3


def protected_packages() -> tuple[str, ...]:
    """Top-level packages of every plugin distribution but the core: families carry eval generators and
    secrets, so agent code must not be able to import or read them."""
    names = {
        ep.value.split(":")[0].split(".")[0]
        for ep in metadata.entry_points(group="metatrain")
        if ep.dist is None or ep.dist.name != "metatrain"
    }
    return tuple(sorted(names))


def probe_policy(workspace: Path, scratch: Path, wall_seconds: float = 180.0) -> SandboxPolicy:
    """Validation probe: read the workspace, write only scratch, no network, 6 GiB, 3 minutes."""
    return SandboxPolicy(
        writable=(scratch,),
        readable=(workspace,),
        deny_packages=protected_packages(),
        wall_seconds=wall_seconds,
        cpu_seconds=int(wall_seconds * 2),
        memory_bytes=6 * GiB,
        network=False,
        cwd=scratch,
    )


def training_policy(
    bundle: Path, model_dir: Path, out_dir: Path, scratch: Path, *, wall_seconds: float, gpu: bool
) -> SandboxPolicy:
    """Inner training: agent code runs here, so the same isolation as the probe, with the model readable."""
    return SandboxPolicy(
        writable=(out_dir, scratch),
        readable=(bundle, model_dir),
        deny_packages=protected_packages(),
        wall_seconds=wall_seconds,
        cpu_seconds=int(wall_seconds * 64),
        memory_bytes=None,
        max_file_bytes=8 * GiB,
        network=False,
        cwd=scratch,
        allow_gpu=gpu,
    )
