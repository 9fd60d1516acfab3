"""The runner: one job bundle in, one result directory out (the unit that runs on GPU pods).

Contract (docs/runner.md): ``run_job(bundle_dir, result_dir, device)`` writes into ``result_dir``
``pre_eval.json``, ``train/metrics.jsonl``, ``train/samples.jsonl`` (a few training rollouts a step),
``train/model/`` (trained weights, safetensors),
``post_eval.json``, ``logs/*.log`` and ``result.json`` (a ``JobResult``). Pre- and post-eval run in
fresh processes that load weights only; training runs agent code in the sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from metatrain.integrity import training_policy
from metatrain.jobs.bundle import load_bundle
from metatrain.jobs.result import finish_job, result_fields
from metatrain.protocols import ProgressFn
from metatrain.sandbox import run_sandboxed
from metatrain.sandbox.linux import die_with_parent
from metatrain.specs import JobResult, PhaseTiming

if TYPE_CHECKING:
    from metatrain.sandbox.runner import SandboxResult
    from metatrain.training.primerl_backend import TrainOutcome

TRAIN_WALL_SECONDS = {"fast": 900.0, "full": 3600.0}


_WALL_HINT = (
    " (the training wall, --train-wall-seconds {wall:g}: it covers loading the model, every step and"
    " saving the model, and this job ran into it; give it more)"
)


def graceful_stop_seconds(wall: float) -> float:
    """When training should stop by itself under a ``wall``-second hard limit: early enough to merge
    and save the model (10% of the wall, between 30 and 120 s)."""
    return wall - min(120.0, max(30.0, 0.1 * wall))


Backend = Literal["trl", "prime-rl"]
EVAL_MODULES: dict[str, str] = {
    "trl": "metatrain.training.evaluation",  # transformers generate
    "prime-rl": "metatrain.training.primerl_backend",  # a vLLM server (GPU pods)
}


class EvalError(RuntimeError):
    pass


def _noop(event: str, data: dict[str, Any]) -> None:
    pass


def run_eval(
    model_dir: Path,
    family: str,
    budget: str,
    device: str,
    out: Path,
    log: Path,
    progress: ProgressFn,
    phase: str,
    total: int,
    eval_env: Mapping[str, str] | None = None,
    backend: Backend = "trl",
) -> dict[str, Any]:
    """Score ``model_dir`` on the hidden eval in a fresh process (``eval_env`` added to its environment)."""
    cmd = [
        sys.executable,
        "-m",
        EVAL_MODULES[backend],
        "--model",
        str(model_dir),
        "--family",
        family,
        "--budget",
        budget,
        "--device",
        device,
        "--out",
        str(out),
    ]
    with log.open("w") as log_fh:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log_fh,
            text=True,
            preexec_fn=die_with_parent,
            env={**os.environ, **eval_env} if eval_env else None,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log_fh.write(line)
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "eval_batch":
                progress("eval", {"phase": phase, "done": event["done"], "total": total})
        code = proc.wait()
    if code != 0 or not out.exists():
        tail = log.read_text()[-2000:]
        raise EvalError(f"{phase} exited with code {code}:\n{tail}")
    return json.loads(out.read_text())


def _emit_new_steps(path: Path, seen: int, progress: ProgressFn, final: bool) -> int:
    """Report ``metrics.jsonl`` rows past the first ``seen`` lines; returns the lines consumed.

    While training runs only newline-terminated lines count (the last one may be half written);
    ``final`` also takes an unterminated last line. Lines that are not a JSON object are skipped.
    """
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return seen
    lines = text.split("\n")
    complete = lines if final else lines[:-1]
    for line in complete[seen:]:
        seen += 1
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            progress("step", row)
    return seen


def _tail_metrics(path: Path, stop: threading.Event, progress: ProgressFn, interval: float = 1.0) -> None:
    """Report each ``metrics.jsonl`` row as a ``step`` event until ``stop``, then read the file once more,
    so rows written after the last poll (the final steps) are reported too."""
    seen = 0
    while True:
        final = stop.is_set()  # checked before reading: the read after stop sees everything training wrote
        seen = _emit_new_steps(path, seen, progress, final)
        if final:
            return
        stop.wait(interval)


def run_job(
    bundle_dir: Path,
    result_dir: Path,
    device: str = "cpu",
    progress: ProgressFn | None = None,
    train_wall_seconds: float | None = None,
    eval_env: Mapping[str, str] | None = None,
    backend: Backend = "trl",
) -> JobResult:
    """Pre-eval, GRPO training and post-eval for one bundle; never raises for job failures.

    ``eval_env`` (e.g. ``METATRAIN_EVAL_SECRET``) reaches only the two eval processes, never training.
    """
    from metatrain.models import prepare_model

    progress = progress or _noop
    bundle_dir, result_dir = bundle_dir.resolve(), result_dir.resolve()
    started = datetime.now().astimezone()
    t0 = time.monotonic()
    manifest = load_bundle(bundle_dir)
    table = manifest.job.train
    logs = result_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    train_dir = result_dir / "train"
    timing = PhaseTiming()
    base = {**result_fields(manifest, device), "started_at": started}

    def finish(**fields: Any) -> JobResult:
        timing.total = time.monotonic() - t0
        return finish_job(result_dir, {**base, **fields, "timing": timing})

    try:
        progress("phase", {"name": "prepare_model", "model": table.model})
        if backend == "prime-rl":  # a Hugging Face id on pods, or a prepared embedded model
            from metatrain.training.primerl_backend import resolve_model_ref

            model_dir = Path(resolve_model_ref(table.model))
        else:
            model_dir = prepare_model(table.model)
        progress("phase", {"name": "pre_eval"})
        t = time.monotonic()
        pre = run_eval(
            model_dir,
            manifest.family,
            manifest.budget,
            device,
            result_dir / "pre_eval.json",
            logs / "pre_eval.log",
            progress,
            "pre_eval",
            manifest.eval_n,
            eval_env,
            backend,
        )
        timing.pre_eval = time.monotonic() - t
    except Exception as exc:
        return finish(status="died", error=f"pre-eval failed: {exc}")

    progress("phase", {"name": "train", "max_steps": table.max_steps})
    t = time.monotonic()
    stop = threading.Event()
    tailer = threading.Thread(
        target=_tail_metrics, args=(train_dir / "metrics.jsonl", stop, progress), daemon=True
    )
    tailer.start()
    wall = train_wall_seconds or TRAIN_WALL_SECONDS.get(manifest.budget, 3600.0)
    with tempfile.TemporaryDirectory(prefix="metatrain-train-") as scratch:
        train_dir.mkdir(parents=True, exist_ok=True)
        res: SandboxResult | TrainOutcome
        if backend == "prime-rl":  # the pod is the job's: prime-rl starts vLLM, trainer, env servers
            from metatrain.training.primerl_backend import run_training

            res = run_training(bundle_dir, train_dir, str(model_dir), wall_seconds=wall)
        else:
            res = run_sandboxed(
                training_policy(
                    bundle_dir,
                    model_dir,
                    train_dir,
                    Path(scratch),
                    wall_seconds=wall,
                    gpu=device.startswith("cuda"),
                ),
                "metatrain.training.trl_backend:train_job",
                {
                    "bundle_dir": str(bundle_dir),
                    "out_dir": str(train_dir),
                    "model_dir": str(model_dir),
                    "device": device,
                    "stop_after_seconds": graceful_stop_seconds(wall),
                },
            )
    stop.set()
    tailer.join()
    timing.train = time.monotonic() - t
    (logs / "train.stdout.log").write_text(res.stdout)
    (logs / "train.stderr.log").write_text(res.stderr)
    if not res.ok:
        return finish(
            status="failed",
            pre_score=pre["score"],
            train_seconds=timing.train,
            error=f"training failed: {res.error}" + (_WALL_HINT.format(wall=wall) if res.timed_out else ""),
        )
    summary = res.value
    (train_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    history = summary.get("history", [])
    try:
        progress("phase", {"name": "post_eval"})
        t = time.monotonic()
        post = run_eval(
            train_dir / "model",
            manifest.family,
            manifest.budget,
            device,
            result_dir / "post_eval.json",
            logs / "post_eval.log",
            progress,
            "post_eval",
            manifest.eval_n,
            eval_env,
            backend,
        )
        timing.post_eval = time.monotonic() - t
    except Exception as exc:
        return finish(
            status="died",
            pre_score=pre["score"],
            train_seconds=summary["train_seconds"],
            error=f"post-eval failed: {exc}",
        )
    rewards = [row["reward"] for row in history if "reward" in row]
    return finish(
        status="succeeded",
        pre_score=pre["score"],
        post_score=post["score"],
        train_steps=summary["steps"],
        train_seconds=summary["train_seconds"],
        train_metrics={
            "first_reward": rewards[0] if rewards else None,
            "last_reward": rewards[-1] if rewards else None,
            "dataset_size": summary.get("dataset_size"),
            "stopped_at_deadline": bool(summary.get("stopped_at_deadline", False)),
            "diverged": summary.get("diverged"),
            "skipped_updates": len(summary.get("skipped_updates") or []),
            "dropped_micro_batches": len(summary.get("dropped_micro_batches") or []),
            "pre_ci95": pre["ci95"],
            "post_ci95": post["ci95"],
            "pre_tool_calls_per_rollout": pre["tool_calls_per_rollout"],
            "post_tool_calls_per_rollout": post["tool_calls_per_rollout"],
        },
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Run one metatrain job bundle")
    parser.add_argument("bundle", type=Path)
    parser.add_argument("result_dir", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", choices=list(EVAL_MODULES), default="trl")
    args = parser.parse_args(argv)

    def show(event: str, data: dict[str, Any]) -> None:
        print(json.dumps({"event": event, **data}), flush=True)

    result = run_job(args.bundle, args.result_dir, args.device, show, backend=args.backend)
    print(result.model_dump_json(indent=2))
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
