"""Optional live smoke test against the real Runpod API. It rents a GPU for about a minute (cents).

Runs only when ``RUNPOD_API_KEY`` is set AND ``CI`` is unset: it must never run in CI.
``METATRAIN_RUNPOD_LIVE_GPUS`` (comma-separated gpuTypeIds, default: a few cheap cards) is the ladder.
It checks the ladder's GPU ids against Runpod's catalogue, provisions one pod through the pool (its id
is in the state file before anything waits on it), waits for Runpod to report a runtime, and
terminates it, verifying Runpod no longer lists it. It does not wait for the bootstrap (that needs an
image with metatrain's wheels, see docs/runpod.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not os.environ.get("RUNPOD_API_KEY") or bool(os.environ.get("CI")),
    reason="live Runpod test: needs RUNPOD_API_KEY and never runs in CI",
)

DEFAULT_GPUS = "NVIDIA RTX A4000,NVIDIA RTX A5000,NVIDIA L4,NVIDIA RTX A6000"


def test_live_provision_and_terminate_one_pod(tmp_path: Path) -> None:
    from metatrain_runpod.api import RunpodApi
    from metatrain_runpod.config import PoolConfig
    from metatrain_runpod.pool import Pool
    from metatrain_runpod.state import StateStore

    gpus = [
        g.strip() for g in os.environ.get("METATRAIN_RUNPOD_LIVE_GPUS", DEFAULT_GPUS).split(",") if g.strip()
    ]
    config = PoolConfig.model_validate(
        {"max_pods": 1, "gpu_ladder": [{"id": g, "count": 1, "cloud_type": "ALL"} for g in gpus]}
    )
    api = RunpodApi(os.environ["RUNPOD_API_KEY"], attempts=3, backoff_s=2.0)
    catalogue = {g["id"] for g in api.gpu_types()}
    assert set(gpus) <= catalogue, f"unknown GPU ids: {sorted(set(gpus) - catalogue)}"

    pool = Pool(config, api, StateStore(tmp_path / "pool"), tmp_path / "costs.jsonl")
    pool.start()
    pod = None
    try:
        pod = pool.provision()
        if pod is None:
            pytest.skip(f"none of {gpus} in stock right now")
        assert pod.record.id in pool.store.path.read_text()  # recorded before waiting
        deadline = time.monotonic() + 300
        while True:
            info = api.get_pod(pod.record.id)
            assert info is not None and info["desiredStatus"] == "RUNNING"
            if info.get("runtime"):
                break
            assert time.monotonic() < deadline, "pod got no runtime within 300 s"
            time.sleep(5)
        assert info["costPerHr"] > 0
    finally:
        pool.shutdown("live smoke test done")
    assert pod is not None
    assert all(p["id"] != pod.record.id for p in api.list_pods())
    assert (tmp_path / "costs.jsonl").read_text().count("runpod:") >= 1
