"""One real job bundle through two providers: ``local`` and the Runpod fleet (emulated account).

The bundle is the calc_chain reference job at the ``fast`` budget, built as an episode builds it
(reference workspace → the validation probe → ``make_bundle``), with the training table cut to one
tiny GRPO step. The emulated pod runs the real runner service with the real ``run_job`` (pre-eval,
sandboxed TRL training on CPU, post-eval), reached through the real ``runpod`` SDK. Both paths run
at the same time (one CPU thread each for the evals) to keep the wall time down.

Cost: four full 48-example hidden evals (about 7 CPU-minutes each here) and two one-step trainings.
Measured on the shared 2-core development machine: 1,496 s wall (pre-evals ~630 s, training ~400 s,
post-evals ~425 s, run side by side).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from metatrain.costs import read_costs
from metatrain.default_plugins.local_provider import LocalProvider
from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.jobs.bundle import make_bundle
from metatrain.protocols import TaskFamily
from metatrain.specs import JobResult
from metatrain_runpod.emulator import Emulator
from metatrain_runpod.provider import RunpodProvider

runpod = pytest.importorskip("runpod")

pytestmark = pytest.mark.e2e
KEY = "slow-fleet-test-api-key-0123456789"
SECRET = "eval-secret-of-the-slow-fleet-test-5c1e"
JOB_ID, RUN_ID = "slow-fleet-job", "slow-fleet-run"
TINY = (  # one GRPO step of 1 prompt x 2 rollouts x 24 tokens (the reference job: 2 x 2 x 4 x 96)
    ("max_steps = 2", "max_steps = 1"),
    ("batch_size = 2", "batch_size = 1"),
    ("rollouts_per_example = 4", "rollouts_per_example = 2"),
    ("max_tokens = 96", "max_tokens = 24"),
)
POD_ENV = ("METATRAIN_HOME", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "HF_HOME", "HF_HUB_OFFLINE")
"""Passed on to the emulated pod's runner (the emulator gives pods PATH, HOME, LANG, TMPDIR only)."""


def reference_bundle(root: Path, family: TaskFamily) -> Path:
    """The reference job, validated by the episode's probe and bundled as the episode loop does."""
    spec = family.task_spec("fast")
    workspace = Workspace(root / "workspace")
    for name, text in family.reference_job("fast").items():
        (workspace.root / name).write_text(text)
    job_toml = workspace.root / "job.toml"
    text = job_toml.read_text()
    for old, new in TINY:
        assert old in text, old
        text = text.replace(old, new)
    job_toml.write_text(text)
    outcome = validate_submission(workspace, spec)
    assert outcome.report.ok and outcome.job is not None, outcome.report.errors
    assert outcome.job.train.max_steps == 1
    return make_bundle(root / "bundle", workspace.root, outcome.job, spec, JOB_ID, RUN_ID)


def files(result_dir: Path) -> set[str]:
    return {str(p.relative_to(result_dir)) for p in result_dir.rglob("*") if p.is_file()}


def pool_toml(path: Path) -> Path:
    path.write_text(
        "max_pods = 1\npoll_interval_s = 0.5\nprovision_timeout_s = 300\nunreachable_grace_s = 300\n"
        'runner_timeout_s = 60\n[[gpu_ladder]]\nid = "NVIDIA H200"\ncount = 1\n'
    )
    return path


@pytest.mark.timeout(2700)
def test_one_bundle_runs_identically_through_local_and_the_emulated_runpod_fleet(
    tmp_path: Path, calc_chain: TaskFamily, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metatrain.models import prepare_model

    prepare_model("smollm2-135m")
    monkeypatch.setenv("METATRAIN_EVAL_SECRET", SECRET)  # local evals inherit it; pods get it per job
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two pipelines share the CPU: one thread each
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    bundle = reference_bundle(tmp_path, calc_chain)

    emu = Emulator(
        api_key=KEY,
        root=tmp_path / "emu",
        runner_module=None,  # the real `metatrain runner serve`, with the real run_job
        extra_pod_env={k: os.environ[k] for k in POD_ENV if k in os.environ},
    )
    monkeypatch.setenv("RUNPOD_API_BASE_URL", emu.start())
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    config = pool_toml(tmp_path / "pool.toml")
    fleet = RunpodProvider(queue_root=tmp_path / "fleet" / "queue", config_path=config)
    local = LocalProvider(queue_root=tmp_path / "local" / "queue")
    events: dict[str, list[tuple[str, dict[str, Any]]]] = {"local": [], "fleet": []}
    results: dict[str, JobResult] = {}
    errors: list[BaseException] = []

    def run_local() -> None:
        try:
            local.submit(bundle, JOB_ID)
            results["local"] = local.wait(JOB_ID, lambda e, d: events["local"].append((e, d)))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=run_local, name="local-provider")
    thread.start()
    try:
        fleet.submit(bundle, JOB_ID)
        results["fleet"] = fleet.wait(JOB_ID, lambda e, d: events["fleet"].append((e, d)))
    finally:
        thread.join()
        emu.close()
    assert not errors, errors

    # Both succeeded, through the real phases, and every pod is gone.
    for name, result in results.items():
        assert result.status == "succeeded", (name, result.error)
        assert result.train_steps == 1 and result.attempts == 1 and result.device == "cpu"
        steps = [d for e, d in events[name] if e == "step"]
        assert [row["step"] for row in steps] == [1], (name, events[name])
        phases = [d["name"] for e, d in events[name] if e == "phase"]
        assert phases[-3:] == ["pre_eval", "train", "post_eval"], (name, phases)
    assert emu.live_pods() == [] and len(emu.terminated) == 1

    # The same results format: files (the fleet leaves the weights on the pod), result.json, evals.
    local_dir, fleet_dir = local.result_dir(JOB_ID), fleet.result_dir(JOB_ID)
    local_files, fleet_files = files(local_dir), files(fleet_dir)
    weights = {f for f in local_files if f.startswith("train/model/")}
    assert "train/model/model.safetensors" in weights
    assert fleet_files == local_files - weights
    expected = {"pre_eval.json", "post_eval.json", "train/metrics.jsonl", "train/summary.json", "result.json"}
    assert expected <= fleet_files
    local_json = json.loads((local_dir / "result.json").read_text())
    fleet_json = json.loads((fleet_dir / "result.json").read_text())
    assert local_json.keys() == fleet_json.keys()
    local_result = JobResult.model_validate(local_json)
    fleet_result = JobResult.model_validate(fleet_json)
    assert local_result == results["local"] and fleet_result == results["fleet"]
    assert local_result.eval_n == fleet_result.eval_n == calc_chain.task_spec("fast").eval_n
    assert local_result.model == fleet_result.model == "smollm2-135m"
    assert local_result.pre_score == fleet_result.pre_score
    local_pre = json.loads((local_dir / "pre_eval.json").read_text())
    fleet_pre = json.loads((fleet_dir / "pre_eval.json").read_text())
    assert local_pre.keys() == fleet_pre.keys()
    assert local_pre["n"] == fleet_pre["n"] == local_result.eval_n
    same = ("score", "n", "ci95", "scores", "tool_calls_per_rollout", "malformed_per_rollout")
    assert {k: local_pre[k] for k in same} == {k: fleet_pre[k] for k in same}  # greedy, same weights
    for name in ("post_eval.json", "train/summary.json"):
        local_keys = json.loads((local_dir / name).read_text()).keys()
        assert local_keys == json.loads((fleet_dir / name).read_text()).keys(), name

    # The pod's time is billed to the job's run; the eval secret is in no file of either path.
    records = read_costs(tmp_path / "fleet" / "costs.jsonl")
    assert RUN_ID in {r.run_id for r in records}
    assert all(r.model == "runpod:NVIDIA H200 x1" for r in records)
    for root in (tmp_path / "local", tmp_path / "fleet", tmp_path / "emu"):
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                assert SECRET.encode() not in path.read_bytes(), path
