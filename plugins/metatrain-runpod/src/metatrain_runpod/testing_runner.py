"""A runner service with a fast fake executor, for the emulator's pods in tests (no models load).

``python -m metatrain_runpod.testing_runner serve --host H --port P --token-env VAR --work-dir DIR``
serves the real ``JobHost`` + HTTP app (``metatrain.fleet``); only the executor differs. It writes
the runner contract's result layout (docs/runner.md) with scores derived from the job id.

Knobs (environment): ``METATRAIN_FAKE_JOB_SECONDS`` (default 0.3), ``METATRAIN_FAKE_EXEC_LOG`` (a
file that gets ``start <job> <pod>`` / ``end <job> <pod>`` lines, plus whether secrets leaked into
the pod), ``METATRAIN_FAKE_RUNNER_VERSION`` (the metatrain version /health reports),
``METATRAIN_FAKE_RUNNER_VERSIONS`` (JSON object merged into /health's ``versions``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import attrs

import metatrain
from metatrain.fleet.jobhost import JobHost
from metatrain.jobs.bundle import load_bundle
from metatrain.jobs.result import finish_job, result_fields
from metatrain.protocols import ProgressFn
from metatrain.specs import JobResult, PhaseTiming, RunnerHealth

LEAK_NAMES = ("RUNPOD_API_KEY", "METATRAIN_EVAL_SECRET")


def _log(line: str) -> None:
    path = os.environ.get("METATRAIN_FAKE_EXEC_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


def fake_run_job(
    bundle_dir: Path,
    result_dir: Path,
    device: str = "cpu",
    progress: ProgressFn | None = None,
    train_wall_seconds: float | None = None,
    eval_env: Mapping[str, str] | None = None,
) -> JobResult:
    """Write a plausible result directory for the bundle after ``METATRAIN_FAKE_JOB_SECONDS``."""
    emit = progress or (lambda event, data: None)
    manifest = load_bundle(bundle_dir)
    pod = os.environ.get("RUNPOD_POD_ID", "local")
    leaked = [n for n in LEAK_NAMES if n in os.environ]
    _log(f"start {manifest.job_id} {pod} eval_secret={'yes' if eval_env else 'no'} leaked={','.join(leaked)}")
    started = datetime.now().astimezone()
    seconds = float(os.environ.get("METATRAIN_FAKE_JOB_SECONDS", "0.3"))
    digest = int(hashlib.sha256(manifest.job_id.encode()).hexdigest()[:8], 16)
    pre, post = 0.2, round(0.2 + (digest % 50) / 100, 2)
    n = manifest.eval_n
    logs, train = result_dir / "logs", result_dir / "train"
    (train / "model").mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)

    def report(score: float) -> dict[str, object]:
        return {
            "score": score,
            "n": n,
            "ci95": [max(0.0, score - 0.1), min(1.0, score + 0.1)],
            "tool_calls_per_rollout": 1.0,
            "seconds": seconds / 3,
        }

    emit("phase", {"name": "pre_eval"})
    (result_dir / "pre_eval.json").write_text(json.dumps(report(pre)))
    (logs / "pre_eval.log").write_text("fake pre-eval\n")
    emit("phase", {"name": "train", "max_steps": 2})
    history = []
    for step in (1, 2):
        time.sleep(seconds / 2)
        row = {"step": step, "reward": pre + step * (post - pre) / 2, "loss": 0.1, "step_time": seconds / 2}
        history.append(row)
        emit("step", row)
    (train / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    (train / "summary.json").write_text(
        json.dumps({"steps": 2, "train_seconds": seconds, "history": history})
    )
    (train / "model" / "model.safetensors").write_bytes(b"\0" * 64)
    (logs / "train.stdout.log").write_text("fake training\n")
    (logs / "train.stderr.log").write_text("")
    emit("phase", {"name": "post_eval"})
    (result_dir / "post_eval.json").write_text(json.dumps(report(post)))
    (logs / "post_eval.log").write_text("fake post-eval\n")
    result = finish_job(
        result_dir,
        {
            **result_fields(manifest, device),
            "status": "succeeded",
            "pre_score": pre,
            "post_score": post,
            "train_steps": 2,
            "train_seconds": seconds,
            "timing": PhaseTiming(pre_eval=0.0, train=seconds, post_eval=0.0, total=seconds),
            "train_metrics": {"first_reward": history[0]["reward"], "last_reward": history[-1]["reward"]},
            "started_at": started,
        },
    )
    _log(f"end {manifest.job_id} {pod}")
    return result


@attrs.define
class FakeHost(JobHost):
    """The real job host, reporting ``reported_version`` and ``reported_versions`` in /health (to test
    version pinning)."""

    reported_version: str = metatrain.__version__
    reported_versions: dict[str, str] = attrs.field(factory=dict)

    def health(self) -> RunnerHealth:
        health = super().health()
        versions = {**health.versions, "metatrain": self.reported_version, **self.reported_versions}
        return health.model_copy(update={"version": self.reported_version, "versions": versions})


def main(argv: list[str] | None = None) -> int:
    from metatrain.fleet.service import bind, create_app, read_token, serve

    parser = argparse.ArgumentParser(description="metatrain runner with a fake executor (tests only)")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-env", default="METATRAIN_RUNNER_TOKEN")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    version = os.environ.get("METATRAIN_FAKE_RUNNER_VERSION") or metatrain.__version__
    versions = json.loads(os.environ.get("METATRAIN_FAKE_RUNNER_VERSIONS") or "{}")
    host = FakeHost(
        args.work_dir.resolve(),
        device=args.device,
        run=fake_run_job,
        reported_version=version,
        reported_versions=versions,
    )
    host.open()
    try:
        app = create_app(host, read_token(args.token_env))
        serve(app, bind(args.host, args.port), log_level="warning", access_log=False)
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
