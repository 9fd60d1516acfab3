"""Frozen baselines: the committed file is current, and stale or missing ones are errors."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from metatrain.baselines import (
    BaselineEntry,
    StaleBaselinesError,
    best_pre,
    eval_hash,
    load_baselines,
    write_entry,
)
from metatrain.protocols import TaskFamily
from metatrain_families.calc_chain import CalcChain


@attrs.frozen
class RelocatedCalcChain(CalcChain):
    path: Path = Path("missing.json")

    def baselines_path(self) -> Path:
        return self.path


def entry(score: float) -> BaselineEntry:
    return BaselineEntry(score=score, n=48, ci95=(0.0, 1.0), device="cpu", seconds=1.0)


def test_committed_baselines_are_current_for_every_allowed_model(calc_chain: TaskFamily) -> None:
    spec = calc_chain.task_spec("fast")
    frozen = load_baselines(calc_chain, "fast", spec.bounds.models)
    assert frozen.n == spec.eval_n
    assert 0.0 <= best_pre(frozen, spec.bounds.models) <= 1.0


BUILT_IN = ("calc_chain", "multi_hop", "string_pipeline", "ledger", "dispatch", "triage")


@pytest.mark.parametrize("budget", ["fast", "full"])
@pytest.mark.parametrize("name", BUILT_IN)
def test_every_committed_baselines_file_matches_its_family(name: str, budget: str) -> None:
    """A version bump or generator change without a re-seed fails here, not in a user's episode."""
    from metatrain.plugins import load_plugins

    family = load_plugins().task_family(name)
    spec = family.task_spec(budget)
    frozen = load_baselines(family, budget, spec.bounds.models)
    assert frozen.n == spec.eval_n
    assert all(e.n == frozen.n and e.ci95[0] <= e.score <= e.ci95[1] for e in frozen.models.values())
    if budget == "full":
        assert all(frozen.models[m].device.startswith("cuda") for m in spec.bounds.models)


def test_stale_and_missing_baselines_are_refused(tmp_path: Path) -> None:
    fam = RelocatedCalcChain(path=tmp_path / "b.json")
    with pytest.raises(StaleBaselinesError, match="no baselines file"):
        load_baselines(fam, "fast")
    digest = eval_hash(fam.hidden_eval("fast"))
    write_entry(fam.path, fam, "fast", "smollm2-135m", entry(0.1), digest, "test")
    write_entry(fam.path, fam, "fast", "qwen2.5-coder-0.5b", entry(0.4), digest, "test")
    got = load_baselines(fam, "fast", ["smollm2-135m", "qwen2.5-coder-0.5b"])
    assert best_pre(got, ["smollm2-135m", "qwen2.5-coder-0.5b"]) == 0.4
    with pytest.raises(StaleBaselinesError, match=r"lack models \['gemma3-270m'\]"):
        load_baselines(fam, "fast", ["gemma3-270m"])
    with pytest.raises(StaleBaselinesError, match="no 'full' baselines"):
        load_baselines(fam, "full")
    stale = rf"version {re.escape(fam.version)}, the family is 2\.0\.0"
    with pytest.raises(StaleBaselinesError, match=stale):
        load_baselines(attrs.evolve(fam, version="2.0.0"), "fast")


def test_a_different_secret_makes_baselines_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fam = RelocatedCalcChain(path=tmp_path / "b.json")
    write_entry(fam.path, fam, "fast", "smollm2-135m", entry(0.1), eval_hash(fam.hidden_eval("fast")), "test")
    monkeypatch.setenv("METATRAIN_EVAL_SECRET", "another-secret")
    with pytest.raises(StaleBaselinesError, match="another hidden eval"):
        load_baselines(fam, "fast")


def _write_one(path: Path, model: str, score: float) -> None:
    fam = RelocatedCalcChain(path=path)
    write_entry(path, fam, "fast", model, entry(score), eval_hash(fam.hidden_eval("fast")), f"seed {model}")


def test_parallel_seeding_runs_keep_every_model(tmp_path: Path) -> None:
    """One seeding process per model, all writing the same file at once: no entry is lost."""
    import multiprocessing

    path = tmp_path / "b.json"
    models = [f"model-{i}" for i in range(6)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_one, args=(path, m, i / 10)) for i, m in enumerate(models)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * len(models)
    got = load_baselines(RelocatedCalcChain(path=path), "fast", models)
    assert {m: got.models[m].score for m in models} == {m: i / 10 for i, m in enumerate(models)}
    assert {m: got.models[m].command for m in models} == {m: f"seed {m}" for m in models}
    assert all(got.models[m].created_at is not None for m in models)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_a_fast_eval_decodes_in_float32_on_every_device() -> None:
    """Fast baselines may be seeded on a GPU; they must decode as a CPU episode's eval does."""
    from metatrain.training.evaluation import eval_dtype

    assert eval_dtype("fast", "cuda") == eval_dtype("fast", "cpu") == "float32"
    assert eval_dtype("full", "cuda:0") == "bfloat16"
    assert eval_dtype("full", "cpu") == "float32"


@pytest.mark.parametrize(
    ("budget", "device", "dtype"), [("fast", "cuda", "float32"), ("full", "cuda", "bfloat16")]
)
def test_seeding_records_the_decoding_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: str, device: str, dtype: str
) -> None:
    """seed-baselines writes the dtype the eval decoded in (the command's plumbing; run_eval stubbed)."""
    from typer.testing import CliRunner

    import metatrain.cli.app as cli
    import metatrain.jobs.runner
    import metatrain.plugins

    fam = RelocatedCalcChain(path=tmp_path / "b.json")
    plugins = type("Plugins", (), {"task_family": staticmethod(lambda name: fam)})()
    monkeypatch.setattr(metatrain.plugins, "load_plugins", lambda: plugins)
    monkeypatch.setattr(cli, "prepared_model", lambda console, key: tmp_path / key)
    report = {"score": 0.25, "n": 4, "ci95": [0.05, 0.7], "seconds": 3.0}
    monkeypatch.setattr(metatrain.jobs.runner, "run_eval", lambda *args: report)
    args = ["seed-baselines", "--family", "calc_chain", "--budget", budget, "--device", device]
    result = CliRunner().invoke(cli.app, [*args, "--models", "smollm2-135m"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"on {device} in {dtype}" in " ".join(result.output.split())
    seeded = load_baselines(fam, budget, ["smollm2-135m"]).models["smollm2-135m"]
    assert (seeded.score, seeded.dtype, seeded.device) == (0.25, dtype, device)
