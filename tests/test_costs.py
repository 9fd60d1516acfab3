"""Prices, budgets, the concurrent ledger, compute costing and the ``costs`` / ``episode`` commands."""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fakes.openai_server import ScriptedServer, call, turn
from typer.testing import CliRunner

from metatrain.cli.app import app
from metatrain.costs import Budget, Price, append_cost, load_price_file, load_prices, read_costs
from metatrain.costs.meter import Meter
from metatrain.costs.report import by_day, by_model, by_run, summarise
from metatrain.default_plugins.local_provider import LocalProvider
from metatrain.protocols import PolicyTurn
from metatrain.specs import CostRecord


def record(
    run_id: str = "r1", kind: str = "agent", usd: float = 0.01, note: str = "", **kw: object
) -> CostRecord:
    return CostRecord(
        ts=kw.pop("ts", datetime.now().astimezone()),  # type: ignore[arg-type]
        run_id=run_id,
        kind=kind,  # type: ignore[arg-type]
        model=str(kw.pop("model", "m")),
        tokens_in=int(kw.pop("tokens_in", 10)),  # type: ignore[call-overload]
        tokens_out=int(kw.pop("tokens_out", 2)),  # type: ignore[call-overload]
        usd=usd,
        note=note,
    )


def test_builtin_prices_and_a_user_file_that_extends_them(tmp_path: Path) -> None:
    builtin = load_prices({})
    assert builtin.lookup("openai/gpt-4o-mini") == Price(0.15, 0.6)
    assert builtin.lookup("openai/gpt-4o-mini:floor") == Price(0.15, 0.6)  # OpenRouter variant suffix
    toml = tmp_path / "p.toml"
    toml.write_text(
        '["openai/gpt-4o-mini"]\ninput = 1.0\noutput = 2.0\n["my/model"]\ninput = 0\noutput = 0.5\n'
    )
    table = load_prices({"METATRAIN_PRICES": str(toml)})
    assert table.lookup("openai/gpt-4o-mini") == Price(1.0, 2.0) and table.lookup("my/model") == Price(0, 0.5)
    assert table.lookup("nobody/knows") is None
    js = tmp_path / "p.json"
    js.write_text(json.dumps({"a": {"input": 3, "output": 4}}))
    assert load_price_file(js)["a"].usd(1_000_000, 500_000) == pytest.approx(5.0)
    js.write_text(json.dumps({"a": {"input": 3}}))
    with pytest.raises(ValueError, match="bad price entry for 'a'"):
        load_price_file(js)


def test_budget_checks_episode_then_global(tmp_path: Path) -> None:
    ledger = tmp_path / "costs.jsonl"
    append_cost(ledger, record(usd=0.9))
    budget = Budget(episode_usd=0.5, global_usd=1.0, ledger=ledger)
    assert budget.check(0.1, 0.05).ok
    assert budget.check(0.4, 0.2).scope == "episode"
    check = budget.check(0.0, 0.2)
    assert not check.ok and check.scope == "global" and "$0.9000 spent" in check.note
    assert Budget().check(1e9, 1e9).ok


def _writer(path: str, worker: int, n: int) -> None:
    for i in range(n):
        append_cost(Path(path), record(run_id=f"w{worker}", usd=0.001, note=f"{worker}-{i}-" + "x" * 6000))


def test_concurrent_ledger_writers_keep_every_line_intact(tmp_path: Path) -> None:
    ledger = tmp_path / "costs.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(ledger), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    records = read_costs(ledger)  # every line parses as a whole record
    assert len(records) == 160
    for w in range(4):
        notes = [r.note.split("-x")[0] for r in records if r.run_id == f"w{w}"]
        assert notes == [f"{w}-{i}" for i in range(40)]


def test_meter_records_agent_calls_and_compute(tmp_path: Path) -> None:
    ledgers = (tmp_path / "run" / "costs.jsonl", tmp_path / "costs.jsonl")
    meter = Meter("run-1", ledgers)
    meter.agent_call(PolicyTurn("", tokens_in=100, tokens_out=10, usd=0.02, model="m"), "openai:m", "note")
    price = LocalProvider().configure(price_per_hour=3.6, device="cpu").price_per_hour
    meter.compute("local:cpu", 50.0, price)
    s = meter.summary
    assert (s.usd, s.compute_usd, s.total_usd, s.calls) == (
        pytest.approx(0.02),
        pytest.approx(0.05),
        pytest.approx(0.07),
        1,
    )
    for ledger in ledgers:
        agent, compute = read_costs(ledger)
        assert (agent.kind, agent.model, agent.note) == ("agent", "m", "note")
        assert (compute.kind, compute.model, compute.usd) == ("compute", "local:cpu", pytest.approx(0.05))
        assert compute.note == "50.0 s at $3.6000/h"
    assert LocalProvider().price_per_hour == 0.0


def test_summaries_per_run_model_and_day() -> None:
    day1 = datetime(2026, 1, 1, 12).astimezone()
    records = [
        record("a", usd=0.1, ts=day1, model="x"),
        record("a", kind="compute", usd=1.0, ts=day1, model="local:cpu", tokens_in=0, tokens_out=0),
        record("b", usd=0.2, ts=day1 + timedelta(days=1), model="x"),
    ]
    runs = summarise(records, by_run)
    assert [(r.key, r.calls, r.agent_usd, r.compute_usd) for r in runs] == [
        ("a", 2, 0.1, 1.0),
        ("b", 1, 0.2, 0.0),
    ]
    assert [r.key for r in summarise(records, by_model)] == ["agent: x", "compute: local:cpu"]
    days = summarise(records, by_day)
    assert [r.key for r in days] == ["2026-01-01", "2026-01-02"] and days[0].total_usd == pytest.approx(1.1)


def test_costs_command_prints_three_tables(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    append_cost(runs / "costs.jsonl", record("run-aaa", usd=0.125, model="openai/gpt-4o-mini"))
    append_cost(runs / "costs.jsonl", record("run-aaa", kind="compute", usd=0.5, model="local:cpu"))
    out = CliRunner().invoke(app, ["costs", "--runs", str(runs)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    for text in ("per run", "per model", "per day", "run-aaa", "agent: openai/gpt-4o-mini", "$0.6250"):
        assert text in out.output
    empty = CliRunner().invoke(app, ["costs", "--runs", str(tmp_path / "none")])
    assert empty.exit_code == 0 and "no cost records" in empty.output


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def test_episode_command_with_base_url_and_budget(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"scripted-model": {"input": 10.0, "output": 30.0}}))
    server.script(*[turn("", call("list_files"))] * 10)
    args = [
        "episode",
        "--agent",
        "openai:scripted-model",
        "--base-url",
        server.url,
        "--runs",
        str(tmp_path / "runs"),
    ]
    args += ["--budget-usd", "0.03", "--agent-max-tokens", "50", "--max-turns", "10", "--json", "r.json"]
    out = CliRunner().invoke(
        app, args, env={"METATRAIN_PRICES": str(prices), "OPENAI_API_KEY": "", "COLUMNS": "200"}
    )
    assert out.exit_code == 0, out.output
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["cost"]["stop"] == "budget_exhausted" and result["cost"]["usd"] <= 0.03
    assert result["reward"]["total"] == -0.1 and "budget_exhausted" in out.output
    bad = CliRunner().invoke(app, ["episode", "--agent", "openai", "--runs", str(tmp_path / "runs")])
    assert bad.exit_code == 2 and "needs a model" in bad.output
