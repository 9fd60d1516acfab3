"""Real local models as agents: ``transformers serve`` behind the openai policy, and the in-process policy."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from metatrain.costs import read_costs
from metatrain.episode.loop import EpisodeConfig, run_episode
from metatrain.models import prepare_model
from metatrain.plugins import load_plugins

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served_smollm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``transformers serve`` on loopback, offline, preloading the prepared SmolLM2 directory."""
    model_dir = prepare_model("smollm2-135m")
    port = _free_port()
    exe = Path(sys.executable).parent / "transformers"
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [str(exe), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_openai_policy_against_transformers_serve(
    served_smollm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = EpisodeConfig(
        family="calc_chain",
        agent="openai:smollm2-135m",
        base_url=served_smollm,
        runs_root=tmp_path / "runs",
        max_turns=2,
        max_nudges=1,
        agent_max_tokens=64,
    )
    result = run_episode(config, load_plugins())
    assert 1 <= result.turns <= 2
    assert result.reward.outcome in {"no_submission", "never_valid"}
    assert result.reward.total in (-0.1, 0.0)
    assert result.cost.tokens_in > 0 and result.cost.tokens_out > 0 and result.cost.usd == 0.0
    records = read_costs(tmp_path / "runs" / "costs.jsonl")
    assert len(records) == result.cost.calls == result.turns
    assert sum(r.tokens_in for r in records) == result.cost.tokens_in
    print(json.dumps({"turns": result.turns, "reward": result.reward.total, "wall_s": result.wall_seconds}))


def test_transformers_policy_runs_an_episode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = EpisodeConfig(
        family="calc_chain",
        agent="transformers:smollm2-135m",
        runs_root=tmp_path / "runs",
        max_turns=2,
        max_nudges=1,
        agent_max_tokens=64,
    )
    result = run_episode(config, load_plugins())
    assert 1 <= result.turns <= 2 and result.reward.total in (-0.1, 0.0)
    assert result.cost.tokens_in > 500 and 0 < result.cost.tokens_out <= 64 * result.turns
    assert result.cost.usd == 0.0 and result.cost.calls == result.turns
    assert [r.model for r in read_costs(Path(result.run_dir) / "costs.jsonl")] == [
        "transformers:smollm2-135m"
    ] * (result.turns)
    print(json.dumps({"turns": result.turns, "reward": result.reward.total, "wall_s": result.wall_seconds}))
