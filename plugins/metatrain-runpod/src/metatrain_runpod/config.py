"""Pool configuration (a boundary model: read from TOML or built from CLI options)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import metatrain

CloudType = Literal["ALL", "SECURE", "COMMUNITY"]
PRIME_RL_MIN_GPUS = 2
"""prime-rl runs vLLM inference and the trainer on separate GPUs."""


class GpuChoice(BaseModel):
    """One rung of the GPU ladder: a Runpod GPU type id and how many GPUs a pod gets."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="Runpod gpuTypeId, e.g. 'NVIDIA H100 80GB HBM3'")
    count: int = Field(2, ge=1, le=8, description="GPUs per pod (prime-rl: 1 inference + 1 trainer)")
    cloud_type: CloudType = "SECURE"


DEFAULT_LADDER = (
    GpuChoice(id="NVIDIA H100 80GB HBM3"),
    GpuChoice(id="NVIDIA H200"),
    GpuChoice(id="NVIDIA A100-SXM4-80GB"),
    GpuChoice(id="NVIDIA A100 80GB PCIe"),
    GpuChoice(id="NVIDIA L40S"),
)
"""Ordered by estimated cost per job (faster cards finish sooner), not by price per hour."""


class Pins(BaseModel):
    """Exact versions every pod is bootstrapped with; a pod whose /health disagrees is terminated."""

    model_config = ConfigDict(extra="forbid")
    prime_rl_repo: str = "https://github.com/PrimeIntellect-ai/prime-rl.git"
    prime_rl_tag: str = "v0.6.0"
    prime_rl_commit: str = Field("38494ccb", pattern=r"^[0-9a-f]{7,40}$")
    verifiers: str = "0.2.1"
    metatrain: str = metatrain.__version__
    trl: str | None = Field(
        default_factory=lambda: _installed("trl"),
        description="Default: this machine's trl (metatrain pins it exactly, pods get the same); '' unpins",
    )
    transformers: str | None = Field(
        default_factory=lambda: _installed("transformers"),
        description="Default: this machine's transformers; '' unpins",
    )
    torch: str | None = Field(
        None, description="Unpinned by default (pods run CUDA builds); a pin without '+' ignores build tags"
    )
    packages: list[str] = Field(
        default_factory=list,
        description="pip requirements for metatrain and its plugins on pods (git+https://...@<commit>, wheel "
        "URLs); empty: the metatrain and metatrain-families <metatrain> wheels baked into the image at "
        "/opt/metatrain-wheels (never 'metatrain' from PyPI: that name belongs to an unrelated project)",
    )

    def expected_versions(self) -> dict[str, str]:
        """What a pod's ``/health`` ``versions`` must report (names as ``metatrain.fleet.versions``)."""
        pinned = {
            "metatrain": self.metatrain,
            "verifiers": self.verifiers,
            "prime-rl": self.prime_rl_commit,
            "trl": self.trl,
            "transformers": self.transformers,
            "torch": self.torch,
        }
        return {name: value for name, value in pinned.items() if value}


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


class PoolConfig(BaseModel):
    """Everything that shapes the warm pool and how the worker drives it."""

    model_config = ConfigDict(extra="forbid")
    max_pods: int = Field(4, ge=1, le=256)
    gpu_ladder: list[GpuChoice] = Field(default_factory=lambda: list(DEFAULT_LADDER), min_length=1)
    image: str = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"
    container_disk_gb: int = Field(80, ge=10)
    volume_gb: int = Field(0, ge=0, description="0: no volume (a stopped pod keeps billing its volume)")
    runner_port: int = Field(8000, ge=1, le=65535)
    port_type: Literal["http", "tcp"] = "http"
    proxy_url: str = Field(
        "https://{pod_id}-{port}.proxy.runpod.net",
        description="Used when the pod's runtime reports no public ip:port for the runner port",
    )
    pins: Pins = Field(default_factory=Pins)
    backend: Literal["auto", "trl", "prime-rl"] = Field(
        "auto",
        description="Training backend of the pods' runners; auto: prime-rl on pods with at least 2 GPUs "
        "(1 inference + 1 trainer), trl (one GPU) otherwise",
    )
    extra_env: dict[str, str] = Field(default_factory=dict, description="Added to every pod's env")
    provision_timeout_s: float = Field(
        900.0, gt=0, description="Create → healthy; past it the pod is replaced"
    )
    max_failed_starts: int = Field(
        5, ge=1, description="Pods in a row that never come up before the worker stops"
    )
    idle_reap_s: float = Field(300.0, ge=0, description="An idle pod is terminated after this long")
    unreachable_grace_s: float = Field(60.0, gt=0, description="A busy pod silent this long is dead")
    job_timeout_s: float = Field(4 * 3600.0, gt=0)
    poll_interval_s: float = Field(2.0, gt=0)
    lease_seconds: float = Field(120.0, gt=0)
    api_attempts: int = Field(5, ge=1, description="Tries per Runpod API call on transient errors")
    api_backoff_s: float = Field(1.0, ge=0)
    api_backoff_max_s: float = Field(30.0, ge=0)
    runner_timeout_s: float = Field(30.0, gt=0, description="HTTP timeout for runner calls")
    download_weights: bool = False

    @field_validator("gpu_ladder")
    @classmethod
    def _distinct(cls, ladder: list[GpuChoice]) -> list[GpuChoice]:
        ids = [g.id for g in ladder]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"GPU ladder lists {dupes} more than once")
        return ladder

    @model_validator(mode="after")
    def _backend_fits_the_ladder(self) -> PoolConfig:
        if self.backend == "prime-rl":
            small = [f"{g.id} x{g.count}" for g in self.gpu_ladder if g.count < PRIME_RL_MIN_GPUS]
            if small:
                raise ValueError(
                    f"backend 'prime-rl' needs at least {PRIME_RL_MIN_GPUS} GPUs per pod (1 inference + "
                    f"1 trainer); the GPU ladder has {small}: raise their count or use backend 'auto'"
                )
        return self


def load_pool_config(path: Path | None, **overrides: object) -> PoolConfig:
    """A PoolConfig from a TOML file (optional), with non-None ``overrides`` applied on top."""
    data: dict[str, object] = tomllib.loads(path.read_text()) if path is not None else {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    return PoolConfig.model_validate(data)
