"""The ``openai`` policy driving full episodes through the real openai SDK against a scripted server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import ScriptedServer, call, error, turn

from metatrain.costs import read_costs
from metatrain.default_plugins import openai_policy
from metatrain.default_plugins.openai_policy import AgentError, AuthError, Retry
from metatrain.episode.loop import (
    MAX_ERRORS_SHOWN,
    NUDGE,
    STALL_NUDGE,
    STALL_TURNS,
    EpisodeConfig,
    EpisodePolicyContext,
    _capped,
    run_episode,
)
from metatrain.episode.tools import MAX_ARGUMENT_BYTES
from metatrain.plugins import PluginManager, load_plugins
from metatrain.protocols import TaskFamily

MODEL = "scripted-model"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No real keys, no stray .env, and a price for the scripted model ($10 in / $30 out per 1M)."""
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.setenv(var, "")  # records the original state, so keys a .env loads are undone too
        monkeypatch.delenv(var)
    prices = tmp_path / "prices.toml"
    prices.write_text(f'["{MODEL}"]\ninput = 10.0\noutput = 30.0\n')
    monkeypatch.setenv("METATRAIN_PRICES", str(prices))


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return load_plugins()


def cfg(tmp_path: Path, server: ScriptedServer, **kw: Any) -> EpisodeConfig:
    kw.setdefault("agent_max_tokens", 100)
    return EpisodeConfig(
        family="calc_chain", agent=f"openai:{MODEL}", base_url=server.url, runs_root=tmp_path / "runs", **kw
    )


def trajectory(run_dir: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(run_dir) / "trajectory.jsonl").read_text().splitlines()]


def tool_results(run_dir: str) -> list[dict[str, Any]]:
    return [t for t in trajectory(run_dir) if t["type"] == "tool_result"]


def test_reference_like_path_with_a_job_that_fails_validation(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager, calc_chain: TaskFamily
) -> None:
    files = calc_chain.reference_job("fast")
    bad_job = files["job.toml"].replace("max_steps = 2", "max_steps = 500")
    server.script(
        turn("Let me look.", call("list_files"), call("read_file", path="TASK.md")),
        turn("", call("get_baseline_scores")),
        turn("Writing the job.", call("write_file", path="env.py", content=files["env.py"])),
        turn("", call("write_file", path="job.toml", content=bad_job)),
        turn("", call("submit_job")),
    )
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    assert result.validation.attempts == 1 and not result.validation.valid
    assert result.reward.outcome == "never_valid" and result.reward.total == 0.0
    assert result.job.status == "not_run" and result.turns == 5
    assert (Path(result.run_dir) / "workspace" / "env.py").read_text() == files["env.py"]
    verdict = tool_results(result.run_dir)[-1]["content"]
    assert verdict.startswith("INVALID (attempt 1)") and "train.max_steps = 500 is outside" in verdict
    # the API saw our tools and the whole conversation, tool results included
    body = server.requests[-1][0]
    assert [t["function"]["name"] for t in body["tools"]][-1] == "submit_job"
    assert body["model"] == MODEL and body["max_tokens"] == 100
    assert body["messages"][0]["role"] == "system" and "TASK.md" in body["messages"][1]["content"]
    tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
    assert set(tool_msgs[0]) == {"role", "tool_call_id", "content"} and len(tool_msgs) == 5
    assert server.requests[0][1]["authorization"] == "Bearer none"


def test_retries_on_429_and_500_then_succeeds(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    server.script(error(429, "slow down"), error(500), error(503), turn("", call("submit_job")))
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    assert len(server.requests) == 4 and result.turns == 1 and result.validation.attempts == 1
    assert result.reward.outcome == "no_submission"  # no job.toml was written


def test_retries_are_bounded(tmp_path: Path, server: ScriptedServer, pm: PluginManager) -> None:
    server.script(*[error(500, retry_after_ms=None)] * 3)
    policy = pm.policy("openai").create(MODEL, context(pm, server.url))
    policy.retry = Retry(attempts=3, base=0.001)
    with pytest.raises(AgentError, match="giving up after 3 attempts"):
        policy.next_turn([{"role": "user", "content": "hi"}], [])
    assert len(server.requests) == 3


def test_connection_errors_are_retried_then_reported(pm: PluginManager) -> None:
    policy = pm.policy("openai").create(MODEL, context(pm, "http://127.0.0.1:9/v1"))
    policy.retry = Retry(attempts=2, base=0.001)
    with pytest.raises(AgentError, match="APIConnectionError"):
        policy.next_turn([{"role": "user", "content": "hi"}], [])


def test_auth_failure_names_the_variable_never_the_key(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-3f9a2c71-do-not-log"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.script(error(401, f"Incorrect API key provided: {secret}"))
    with pytest.raises(AuthError) as info:
        run_episode(cfg(tmp_path, server), pm)
    assert "OPENAI_API_KEY" in str(info.value) and "401" in str(info.value) and secret not in str(info.value)
    assert len(server.requests) == 1 and server.requests[0][1]["authorization"] == f"Bearer {secret}"
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert [t["type"] for t in trajectory(str(run_dir))][-1] == "policy_error"
    assert_absent(secret, tmp_path / "runs")


def test_factory_rejects_bad_arguments(pm: PluginManager) -> None:
    factory = pm.policy("openai")
    with pytest.raises(ValueError, match="needs a model"):
        factory.create(None, context(pm, None))
    with pytest.raises(ValueError, match="OPENROUTER_API_KEY"):
        factory.create(MODEL, context(pm, None))


def test_nudges_then_gives_up_with_minus_point_one(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    server.script(turn("I am thinking."), turn("Still thinking."), turn("Hmm."), turn("", call("list_files")))
    result = run_episode(cfg(tmp_path, server, max_nudges=2), pm)
    assert result.turns == 3 and result.reward.total == -0.1 and result.reward.outcome == "no_submission"
    assert [m["content"] for m in server.requests[-1][0]["messages"] if m["role"] == "user"][-2:] == [
        NUDGE
    ] * 2


def test_stalling_agent_gets_a_stall_nudge(tmp_path: Path, server: ScriptedServer, pm: PluginManager) -> None:
    server.script(*[turn("", call("list_files"))] * (STALL_TURNS + 1))
    result = run_episode(cfg(tmp_path, server, max_turns=STALL_TURNS + 1), pm)
    nudges = [t for t in trajectory(result.run_dir) if t["type"] == "nudge"]
    assert [(n["turn"], n["content"]) for n in nudges] == [(STALL_TURNS, STALL_NUDGE)]
    assert server.requests[-1][0]["messages"][-1] == {"role": "user", "content": STALL_NUDGE}


def test_validation_errors_are_verbatim_and_capped() -> None:
    errors = [f"error number {i}" for i in range(MAX_ERRORS_SHOWN + 5)]
    text = _capped(errors)
    assert text.startswith("- error number 0\n- error number 1") and "5 more errors not shown" in text
    assert f"error number {MAX_ERRORS_SHOWN}" not in text
    assert _capped(["x" * 10_000]).endswith(" [...]")


def test_malformed_unknown_and_oversized_tool_calls_are_reported(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    huge = json.dumps({"path": "big.txt", "content": "x" * (MAX_ARGUMENT_BYTES + 10)})
    server.script(
        turn(
            "",
            ("write_file", '{"path": "a.txt", "content": '),
            ("launch_rockets", "{}"),
            ("write_file", huge),
        ),
        turn("", call("submit_job")),
    )
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    first = tool_results(result.run_dir)[:3]
    assert [t["ok"] for t in first] == [False, False, False]
    assert "not valid JSON" in first[0]["content"] and "unknown tool 'launch_rockets'" in first[1]["content"]
    assert f"exceed {MAX_ARGUMENT_BYTES} bytes" in first[2]["content"]
    assert not (Path(result.run_dir) / "workspace" / "big.txt").exists()
    # the trajectory keeps the raw malformed text; the wire gets a valid object instead
    raw = next(t for t in trajectory(result.run_dir) if t.get("tool_calls"))["tool_calls"][0]["function"]
    assert raw["arguments"] == '{"path": "a.txt", "content": '
    wire = next(m for m in server.requests[1][0]["messages"] if m.get("tool_calls"))
    assert wire["tool_calls"][0]["function"]["arguments"] == "{}" and wire["content"] is None


def test_usage_is_metered_per_call_into_result_and_both_ledgers(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    server.script(
        turn("", call("list_files"), prompt_tokens=1000, completion_tokens=50, cost=0.0123),
        turn("", call("read_file", path="TASK.md"), prompt_tokens=2000, completion_tokens=70),
        turn("", call("submit_job"), prompt_tokens=3000, completion_tokens=30, cost=0.5),
    )
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    priced = (2000 * 10.0 + 70 * 30.0) / 1e6  # no usage.cost: from the price table
    expected = 0.0123 + priced + 0.5
    assert (result.cost.tokens_in, result.cost.tokens_out, result.cost.calls) == (6000, 150, 3)
    assert result.cost.usd == pytest.approx(expected) and result.cost.total_usd == pytest.approx(expected)
    assert result.cost.compute_usd == 0.0
    for ledger in (Path(result.run_dir) / "costs.jsonl", tmp_path / "runs" / "costs.jsonl"):
        records = read_costs(ledger)
        assert [r.kind for r in records] == ["agent"] * 3 and {r.run_id for r in records} == {result.run_id}
        assert [r.usd for r in records] == pytest.approx([0.0123, priced, 0.5])
        assert sum(r.tokens_in for r in records) == 6000 and records[0].model == MODEL


def test_unknown_model_price_is_zero_with_a_note(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("METATRAIN_PRICES")
    server.script(turn("", call("submit_job")))
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    assert result.cost.usd == 0.0 and result.cost.tokens_in > 0
    assert any("no price for model 'scripted-model'" in n for n in result.cost.notes)
    assert "no price" in read_costs(tmp_path / "runs" / "costs.jsonl")[0].note


def test_episode_budget_stops_before_overspending(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    server.script(*[turn("", call("list_files"))] * 20)
    result = run_episode(cfg(tmp_path, server, budget_usd=0.05, max_turns=20), pm)
    assert result.cost.budget_exhausted and result.cost.stop == "budget_exhausted"
    assert 1 <= result.turns < 20 and len(server.requests) == result.turns
    assert result.reward.total == -0.1 and result.reward.outcome == "no_submission"
    spent = sum(r.usd for r in read_costs(tmp_path / "runs" / "costs.jsonl"))
    assert 0 < spent <= 0.05 and result.cost.usd == pytest.approx(spent)
    assert trajectory(result.run_dir)[-1]["type"] == "budget_exhausted"
    assert (
        json.loads((Path(result.run_dir) / "result.json").read_text())["cost"]["stop"] == "budget_exhausted"
    )


def test_global_budget_counts_the_whole_ledger(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager
) -> None:
    server.script(*[turn("", call("list_files"))] * 10)
    first = run_episode(cfg(tmp_path, server, max_turns=2), pm)
    spent = first.cost.usd
    second = run_episode(cfg(tmp_path, server, max_turns=10, global_budget_usd=spent + 0.02), pm)
    assert second.cost.stop == "budget_exhausted" and "global budget" in second.cost.notes[-1]
    assert sum(r.usd for r in read_costs(tmp_path / "runs" / "costs.jsonl")) <= spent + 0.02
    third = run_episode(cfg(tmp_path, server, global_budget_usd=spent), pm)
    assert third.turns == 0 and third.reward.total == -0.1


def test_keys_never_reach_the_run_directory_or_ledger(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {"OPENAI_API_KEY": "sk-openai-7d1e0b55-secret", "OPENROUTER_API_KEY": "sk-or-v1-9c4b-secret"}
    for var, value in secrets.items():
        monkeypatch.setenv(var, value)
    server.script(
        turn("", call("write_file", path="job.toml", content="family = 1\n")),
        turn("", call("read_file", path="job.toml")),
        turn("", call("submit_job")),
    )
    result = run_episode(cfg(tmp_path, server, max_attempts=1), pm)
    assert server.requests[0][1]["authorization"] == f"Bearer {secrets['OPENAI_API_KEY']}"
    assert result.validation.attempts == 1
    for value in secrets.values():
        assert_absent(value, tmp_path / "runs")


def test_openrouter_default_sends_its_key_and_asks_for_usage_cost(
    tmp_path: Path, server: ScriptedServer, pm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_policy, "OPENROUTER_URL", server.url)
    (tmp_path / ".env").write_text("OPENROUTER_API_KEY=sk-or-from-dotenv\nOPENAI_API_KEY=from-dotenv\n")
    monkeypatch.setenv("OPENAI_API_KEY", "real-env-wins")
    server.script(turn("", call("submit_job"), cost=0.25))
    config = EpisodeConfig(
        family="calc_chain", agent=f"openai:{MODEL}", runs_root=tmp_path / "runs", max_attempts=1
    )
    result = run_episode(config, pm)
    body, headers = server.requests[0]
    assert headers["authorization"] == "Bearer sk-or-from-dotenv" and body["usage"] == {"include": True}
    assert result.cost.usd == pytest.approx(0.25)
    import os

    assert os.environ["OPENAI_API_KEY"] == "real-env-wins"


def context(pm: PluginManager, base_url: str | None) -> EpisodePolicyContext:
    family = pm.task_family("calc_chain")
    return EpisodePolicyContext(family, family.task_spec("fast"), "fast", base_url=base_url, max_tokens=64)


def assert_absent(secret: str, root: Path) -> None:
    needle = secret.encode()
    for path in root.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"secret found in {path}"
