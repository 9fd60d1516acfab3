"""A stand-in for ``run_job`` that loads no model: a real-shaped result directory in about a second.

For tests of anything that drives runners (the service, providers, pod emulators):
``metatrain runner serve --executor metatrain.fleet.fake_runner:fake_run_job``. Its behaviour comes
from the runner process's environment:

- ``METATRAIN_FAKE_JOB_SECONDS`` (default 0.5): wall time, spread over the phases;
- ``METATRAIN_FAKE_JOB_OUTCOME`` (default ``succeeded``): ``succeeded``, ``failed``, ``died`` or
  ``crash`` (the executor raises, as a runner bug would).

Scores are derived from the bundle's manifest hash, so the same bundle always gets the same result.
Only the *names* of ``eval_env`` variables are recorded (``pre_eval.json``), never their values.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from metatrain.jobs.bundle import load_bundle
from metatrain.jobs.result import finish_job, result_fields
from metatrain.protocols import ProgressFn
from metatrain.specs import JobResult, PhaseTiming

OUTCOMES = ("succeeded", "failed", "died", "crash")


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def fake_run_job(
    bundle_dir: Path,
    result_dir: Path,
    device: str = "cpu",
    progress: ProgressFn | None = None,
    train_wall_seconds: float | None = None,
    eval_env: Mapping[str, str] | None = None,
) -> JobResult:
    """Write pre_eval.json, train/ (metrics, summary, a tiny model), post_eval.json, logs/, result.json."""
    progress = progress or (lambda event, data: None)
    seconds = float(os.environ.get("METATRAIN_FAKE_JOB_SECONDS", "0.5"))
    outcome = os.environ.get("METATRAIN_FAKE_JOB_OUTCOME", "succeeded")
    if outcome not in OUTCOMES:
        raise ValueError(f"METATRAIN_FAKE_JOB_OUTCOME must be one of {OUTCOMES}, not {outcome!r}")
    started = datetime.now().astimezone()
    manifest = load_bundle(bundle_dir)
    seed = int(hashlib.sha256((bundle_dir / "bundle.json").read_bytes()).hexdigest()[:8], 16)
    pre, post = (seed % 100) / 400, (seed % 100) / 400 + 0.2
    steps = manifest.job.train.max_steps
    logs, train = result_dir / "logs", result_dir / "train"
    logs.mkdir(parents=True, exist_ok=True)
    (train / "model").mkdir(parents=True, exist_ok=True)
    tick = seconds / (4 + steps)
    base = {**result_fields(manifest, device), "started_at": started, "timing": PhaseTiming(total=seconds)}

    def finish(**fields: object) -> JobResult:
        return finish_job(result_dir, {**base, **fields})

    progress("phase", {"name": "prepare_model", "model": manifest.job.train.model})
    progress("phase", {"name": "pre_eval"})
    for done in (manifest.eval_n // 2, manifest.eval_n):
        _append(logs / "pre_eval.log", f"pre_eval batch done={done}\n")
        progress("eval", {"phase": "pre_eval", "done": done, "total": manifest.eval_n})
        time.sleep(tick)
    report = {"score": pre, "n": manifest.eval_n, "ci95": [0.0, 1.0], "tool_calls_per_rollout": 1.0}
    (result_dir / "pre_eval.json").write_text(json.dumps({**report, "eval_env_keys": sorted(eval_env or {})}))
    if outcome == "crash":
        raise RuntimeError("fake runner crashed after pre-eval")
    if outcome == "died":
        return finish(status="died", pre_score=pre, error="pre-eval failed: fake eval process died")
    progress("phase", {"name": "train", "max_steps": steps})
    for step in range(1, steps + 1):
        row = {"step": step, "reward": pre + step * (post - pre) / steps, "loss": 1.0 / step}
        _append(train / "metrics.jsonl", json.dumps(row) + "\n")
        _append(logs / "train.stderr.log", f"step {step}/{steps} reward={row['reward']:.3f}\n")
        progress("step", row)
        time.sleep(tick)
    _append(logs / "train.stdout.log", f"trained {steps} steps\n")
    if outcome == "failed":
        return finish(status="failed", pre_score=pre, error="training failed: fake rubric raised")
    (train / "summary.json").write_text(json.dumps({"steps": steps, "train_seconds": seconds / 2}))
    (train / "model" / "model.safetensors").write_bytes(seed.to_bytes(8, "big") * 512)
    progress("phase", {"name": "post_eval"})
    _append(logs / "post_eval.log", f"post_eval batch done={manifest.eval_n}\n")
    progress("eval", {"phase": "post_eval", "done": manifest.eval_n, "total": manifest.eval_n})
    (result_dir / "post_eval.json").write_text(json.dumps({**report, "score": post}))
    time.sleep(tick)
    return finish(
        status="succeeded", pre_score=pre, post_score=post, train_steps=steps, train_seconds=seconds / 2
    )
