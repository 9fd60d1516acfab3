"""Inner training on prime-rl v0.6.0 (GPU pods), and hidden-eval scoring through a vLLM server.

One job: ``render_config`` turns the bundle's training table (``training.table.MAPPING``) into an
``rl.toml``; ``dry_run`` checks it with ``uv run rl @ job.toml --dry-run`` in the prime-rl checkout
(``$METATRAIN_PRIME_RL_DIR``); ``train`` launches ``uv run rl @ job.toml``, turns prime-rl's step
log lines into ``metrics.jsonl`` rows (the TRL backend's format), enforces the wall budget and
collects the final weights (LoRA merged) into ``out_dir/model``. ``evaluate_with_vllm`` plays the
family's hidden eval against an OpenAI-compatible vLLM server (``python -m`` this module is the
eval process the runner starts). The pod bootstrap and what is untested are in docs/prime-rl.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from metatrain.jobs.bundle import load_bundle
from metatrain.sandbox.linux import die_with_parent
from metatrain.specs import BundleManifest, JobFile
from metatrain.training.dialect import ParsedCall, call_tool, parse_assistant
from metatrain.training.rollout import turn_token_cap
from metatrain.training.samples import append_samples, prime_rl_rows
from metatrain.training.table import primerl_seq_len, primerl_values

PRIME_RL_VERSION = "0.6.0"
PRIME_RL_COMMIT = "38494ccb4140897b1c9e7a9ba8da59dcd8940d47"
PRIME_RL_DIR_ENV = "METATRAIN_PRIME_RL_DIR"
ORCHESTRATOR_SUBDIR = "run_default"
"""prime-rl puts the orchestrator's outputs (its saved rollouts among them) in this folder of the
shared ``output_dir`` (``prime_rl/utils/validation.py`` at the pinned commit)."""
AUTO_RENDERER_MODELS = frozenset({"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"})
"""Models prime-rl's ``renderer = "auto"`` resolves (its MODEL_RENDERER_MAP); others use vLLM's chat API."""
TOOL_CALL_PARSER = "hermes"
"""vLLM's parser for ``<tool_call>{json}</tool_call>``, the project dialect's tagged form."""
PASS_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
PASS_ENV_PREFIXES = ("HF_", "UV_", "XDG_", "TRITON_", "NCCL_", "VLLM_")
"""Environment a prime-rl or vLLM child keeps; everything else (API keys, the eval secret) is dropped."""
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NUM = r"(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
ORCH_STEP_RE = re.compile(
    rf"Step (?P<step>\d+) \| (?P<time>[^|]+?) \| Reward (?P<reward>{NUM}) \| "
    rf"Trainable (?P<trainable>\d+)/(?P<survivors>\d+) \([^)]*\) \| Turns (?P<turns>{NUM}) \| "
    rf"Max Off-Policy (?P<off_policy>\d+) \| Error (?P<error>{NUM})% \| Truncation (?P<truncation>{NUM})%"
)
TRAINER_STEP_RE = re.compile(
    rf"Step (?P<step>\d+) \| (?P<time>[^|]+?) \| Loss (?P<loss>{NUM}) \| Entropy (?P<entropy>{NUM})"
    rf"(?: \| Mismatch KL (?P<mismatch_kl>{NUM}))?(?: \| Grad\. Norm (?P<grad_norm>{NUM}))?"
    rf"(?: \| LR (?P<learning_rate>{NUM}))?"
)
VALIDATION_HEADER_RE = re.compile(r"(\d+) validation errors? for (\w+)")


class PrimeRLError(RuntimeError):
    """prime-rl could not run the job; the message says why."""


class PrimeRLSetupError(PrimeRLError):
    """The pod is not set up: no prime-rl checkout, no ``uv``, no vLLM."""


class PrimeRLConfigError(PrimeRLError):
    """``rl --dry-run`` rejected the rendered config; ``errors`` holds one line per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("prime-rl rejected the config:\n" + "\n".join(f"  - {e}" for e in self.errors))


class PrimeRLRunError(PrimeRLError):
    """``uv run rl`` failed or produced no weights."""


class TrainingTimeout(PrimeRLError):
    """The run exceeded its wall budget and was stopped."""


@attrs.frozen
class GpuSplit:
    """GPUs of one pod given to vLLM inference and to the trainer (prime-rl needs at least one each)."""

    inference: int = 1
    trainer: int = 1

    def __attrs_post_init__(self) -> None:
        if self.inference < 1 or self.trainer < 1:
            raise ValueError(f"prime-rl needs >= 1 inference and >= 1 trainer GPU, got {self}")


# -- configuration ---------------------------------------------------------------------------


def env_module_name(job_id: str) -> str:
    """The importable module name the job's environment is staged under (also its prime-rl env id)."""
    slug = re.sub(r"[^a-z0-9]+", "_", job_id.lower()).strip("_") or "job"
    return f"metatrain_job_{slug}"


def stage_environment(workspace: Path, job: JobFile, job_id: str, dest: Path) -> str:
    """Copy the job's environment module to ``dest/<module>.py``; prime-rl imports it from PYTHONPATH.

    prime-rl loads ``[[orchestrator.train.env]] id`` with ``verifiers.load_environment(id)``, which
    imports a module of that name (ids with a ``/`` would be installed from the Prime hub instead).
    """
    src = (workspace / job.environment).resolve()
    if not src.is_file() or not src.is_relative_to(workspace.resolve()):
        raise PrimeRLError(f"environment module {job.environment!r} is not a file in the workspace")
    module = env_module_name(job_id)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest / f"{module}.py")
    return module


def _set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted key path; ``name[i]`` addresses item i of a list of tables."""
    node: Any = doc
    parts = path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        m = re.fullmatch(r"(\w+)\[(\d+)\]", part)
        if m:
            items = node.setdefault(m.group(1), [])
            while len(items) <= int(m.group(2)):
                items.append({})
            node = items[int(m.group(2))]
            if last:
                raise ValueError(f"key path {path!r} ends in a list item")
        elif last:
            node[part] = value
        else:
            node = node.setdefault(part, {})


def render_config(
    bundle: BundleManifest, model_ref: str, output_dir: Path, gpus: GpuSplit | None = None
) -> str:
    """The job as a prime-rl v0.6.0 ``rl.toml`` (TOML text); raises ``UnsupportedSetting``.

    ``model_ref`` is what prime-rl and vLLM load (a Hugging Face id or a model directory);
    ``output_dir`` is prime-rl's output directory (final weights land in ``weights/step_N``).
    """
    import tomli_w

    gpus = gpus or GpuSplit()
    table = bundle.job.train
    doc: dict[str, Any] = {}
    values = primerl_values(table)
    values["model.name"] = model_ref
    fixed: dict[str, Any] = {
        "output_dir": str(output_dir),
        "weight_broadcast.type": "filesystem",
        "deployment.type": "single_node",
        "deployment.num_infer_gpus": gpus.inference,
        "deployment.num_train_gpus": gpus.trainer,
        "deployment.gpus_per_node": gpus.inference + gpus.trainer,
        "inference.model.max_model_len": primerl_seq_len(table.max_tokens),
        "orchestrator.train.env[0].id": env_module_name(bundle.job_id),
        "orchestrator.train.env[0].args": dict(bundle.job.env_args),
        "trainer.ckpt.weights_only": True,
    }
    if bundle.turn_max_tokens is not None:  # each turn as the eval caps it; max_tokens stays the total
        fixed["orchestrator.train.sampling.max_completion_tokens"] = turn_token_cap(
            table.max_tokens, bundle.turn_max_tokens
        )
    if table.lora is not None:
        fixed["trainer.ckpt.weights.save_adapter_separately"] = True
    if model_ref not in AUTO_RENDERER_MODELS:
        fixed["orchestrator.renderer"] = "None"  # prime-rl's spelling of None: vLLM chat completions
        fixed["inference.model.tool_call_parser"] = TOOL_CALL_PARSER
    doc["ckpt"] = {}  # a bare [ckpt] enables checkpointing on trainer and orchestrator: final weights
    for path, value in {**values, **fixed}.items():
        _set_path(doc, path, value)
    header = (
        f"# prime-rl v{PRIME_RL_VERSION} ({PRIME_RL_COMMIT[:8]}) config for job {bundle.job_id} "
        f"({bundle.family}), rendered by metatrain\n"
    )
    return header + tomli_w.dumps(doc)


# -- running prime-rl --------------------------------------------------------------------------


def prime_rl_checkout(path: str | os.PathLike[str] | None = None) -> Path:
    """The prime-rl checkout: ``path`` or ``$METATRAIN_PRIME_RL_DIR``; it must hold a pyproject.toml."""
    raw = path if path is not None else os.environ.get(PRIME_RL_DIR_ENV)
    if not raw:
        raise PrimeRLSetupError(f"no prime-rl checkout: set {PRIME_RL_DIR_ENV} (see docs/prime-rl.md)")
    checkout = Path(raw).expanduser().resolve()
    if not (checkout / "pyproject.toml").is_file():
        raise PrimeRLSetupError(f"{checkout} is not a prime-rl checkout (no pyproject.toml)")
    return checkout


def uv_executable() -> str:
    found = os.environ.get("METATRAIN_UV_BIN") or shutil.which("uv")
    if not found:
        raise PrimeRLSetupError("uv is not on PATH (prime-rl runs through `uv run`; see docs/prime-rl.md)")
    return found


def child_env(pythonpath: Path | None = None) -> dict[str, str]:
    """A scrubbed environment for prime-rl and vLLM children: no keys, tokens or the eval secret."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in PASS_ENV or k.startswith(PASS_ENV_PREFIXES)) and not any(w in k for w in SECRET_WORDS)
    }
    env.setdefault("PATH", os.defpath)
    env["PYTHONUNBUFFERED"] = "1"
    env["WANDB_MODE"] = "disabled"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def _validation_errors(lines: Sequence[str]) -> list[str]:
    """``loc: message`` for each entry of pydantic ValidationError blocks in ``lines``."""
    errors: list[str] = []
    for i, line in enumerate(lines):
        if not VALIDATION_HEADER_RE.search(line):
            continue
        loc: str | None = None
        for j in range(i + 1, len(lines)):
            entry, text = lines[j], lines[j].strip()
            indented = entry.startswith((" ", "\t"))
            if not text or (not indented and not (j + 1 < len(lines) and lines[j + 1].startswith(" "))):
                break
            if not indented:
                loc = text
            elif not text.startswith("For further information"):
                msg = re.sub(r"\s*\[type=.*$", "", text)
                errors.append(f"{loc}: {msg}" if loc else msg)
    return errors


def describe_failure(text: str) -> list[str]:
    """Why a prime-rl/uv output failed: validation errors, uv errors, the last exception, or the tail."""
    lines = [ANSI_RE.sub("", line).rstrip() for line in text.splitlines()]
    if errors := _validation_errors(lines):
        return errors
    if uv_errors := [line.strip() for line in lines if line.startswith("error:")]:
        return uv_errors
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            tail = [line.strip() for line in lines[i + 1 :] if line.strip() and not line.startswith(" ")]
            if tail:
                return [tail[0]]
    if flagged := [line.strip() for line in lines if re.search(r"\b(ERROR|Error)\b", line)]:
        return flagged[-3:]
    return [line.strip() for line in lines if line.strip()][-5:] or ["no output"]


def _run_rl(
    config: Path, checkout: Path, pythonpath: Path | None, log: Path, extra: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    cmd = [uv_executable(), "run", "rl", "@", str(config), *extra]
    with log.open("ab") as fh:
        return subprocess.Popen(
            cmd,
            cwd=checkout,
            env=child_env(pythonpath),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the run's process group (prime-rl's launcher stops its children), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def dry_run(
    config_path: Path, *, prime_rl_dir: str | os.PathLike[str] | None = None, timeout: float = 600.0
) -> Path:
    """Validate a config with ``uv run rl @ CONFIG --dry-run``; returns the resolved-configs directory.

    Raises PrimeRLConfigError (one line per problem) when prime-rl rejects it, PrimeRLSetupError
    when uv or the checkout is missing, TrainingTimeout when it runs past ``timeout``.
    """
    import tomllib

    config_path = config_path.resolve()
    checkout = prime_rl_checkout(prime_rl_dir)
    try:
        output_dir = Path(tomllib.loads(config_path.read_text()).get("output_dir", "outputs"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PrimeRLConfigError([f"{config_path}: {exc}"]) from exc
    log = config_path.with_name(config_path.stem + ".dry-run.log")
    log.write_bytes(b"")
    proc = _run_rl(config_path, checkout, None, log, ("--dry-run",))
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _stop(proc, 5.0)
        raise TrainingTimeout(f"rl --dry-run took longer than {timeout:.0f}s") from exc
    text = log.read_text(errors="replace")
    if code != 0:
        reasons = describe_failure(text)
        if any("Failed to spawn" in r or "No such file" in r for r in reasons):
            raise PrimeRLSetupError(f"`uv run rl` failed in {checkout}: {'; '.join(reasons)}")
        raise PrimeRLConfigError(reasons)
    out = output_dir if output_dir.is_absolute() else checkout / output_dir
    return out / "configs"


# -- progress ----------------------------------------------------------------------------------


def parse_duration(text: str) -> float | None:
    """prime-rl's ``format_time`` back to seconds: '350ms', '4.2s', '2m 3s', '1h 5m', '1d 2h'."""
    seconds = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)\b", text.strip())
    if not parts:
        return None
    return sum(float(v) / 1000 if u == "ms" else float(v) * seconds[u] for v, u in parts)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def log_message(line: str) -> str:
    """The message of one log line: JSON logging's ``message`` field, or the text without colours."""
    line = ANSI_RE.sub("", line).strip()
    if line.startswith("{"):
        try:
            return str(json.loads(line).get("message", ""))
        except (json.JSONDecodeError, AttributeError):
            return line
    return line


@attrs.define
class ProgressParser:
    """Joins the orchestrator's and the trainer's per-step lines into one metrics row per step.

    Rows follow the TRL backend's ``metrics.jsonl``: ``step`` (1-based), ``max_steps``, ``elapsed``
    and numbers (``reward``, ``loss``, ...). A row is complete when both lines of its step arrived.
    """

    max_steps: int
    t0: float = attrs.field(factory=time.monotonic)
    _orch: dict[int, dict[str, float]] = attrs.Factory(dict)
    _trainer: dict[int, dict[str, float]] = attrs.Factory(dict)
    _done: set[int] = attrs.Factory(set)

    def feed(self, line: str) -> list[dict[str, Any]]:
        msg = log_message(line)
        if m := ORCH_STEP_RE.search(msg):
            survivors = int(m["survivors"])
            self._orch[int(m["step"])] = _clean(
                {
                    "reward": _number(m["reward"]),
                    "step_time": parse_duration(m["time"]),
                    "trainable_fraction": int(m["trainable"]) / survivors if survivors else 0.0,
                    "turns": _number(m["turns"]),
                    "max_off_policy": float(m["off_policy"]),
                    "error_rate": _pct(m["error"]),
                    "truncation_rate": _pct(m["truncation"]),
                }
            )
            return self._ready(int(m["step"]))
        if m := TRAINER_STEP_RE.search(msg):
            self._trainer[int(m["step"])] = _clean(
                {
                    "loss": _number(m["loss"]),
                    "entropy": _number(m["entropy"]),
                    "mismatch_kl": _number(m["mismatch_kl"]),
                    "grad_norm": _number(m["grad_norm"]),
                    "learning_rate": _number(m["learning_rate"]),
                    "train_step_time": parse_duration(m["time"]),
                }
            )
            return self._ready(int(m["step"]))
        return []

    def flush(self) -> list[dict[str, Any]]:
        """Rows of steps seen by only one side (the run ended); call once at the end."""
        steps = sorted((set(self._orch) | set(self._trainer)) - self._done)
        return [self._row(s) for s in steps]

    def _ready(self, step: int) -> list[dict[str, Any]]:
        if step in self._done or step not in self._orch or step not in self._trainer:
            return []
        return [self._row(step)]

    def _row(self, step: int) -> dict[str, Any]:
        self._done.add(step)
        row: dict[str, Any] = {
            "step": step + 1,
            "max_steps": self.max_steps,
            "elapsed": round(time.monotonic() - self.t0, 3),
        }
        row.update(self._orch.get(step, {}))
        row.update(self._trainer.get(step, {}))
        return row


def _pct(text: str) -> float | None:
    value = _number(text)
    return None if value is None else value / 100.0


def _clean(values: Mapping[str, float | None]) -> dict[str, float]:
    return {k: v for k, v in values.items() if v is not None}


@attrs.define
class LogTail:
    """New complete lines of a growing file, from where the last call stopped."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    def lines(self) -> Iterator[str]:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        chunks = (self.partial + data).split(b"\n")
        self.partial = chunks.pop()
        for chunk in chunks:
            yield chunk.decode(errors="replace")


# -- weights -----------------------------------------------------------------------------------


def final_weights_dir(outputs: Path) -> Path:
    """``outputs/weights/step_N`` of the highest N that prime-rl marked complete (a STABLE file)."""
    steps = [
        (int(p.name.removeprefix("step_")), p)
        for p in (outputs / "weights").glob("step_*")
        if p.name.removeprefix("step_").isdigit() and (p / "STABLE").exists()
    ]
    if not steps:
        raise PrimeRLRunError(f"prime-rl wrote no complete weight checkpoint under {outputs / 'weights'}")
    return max(steps)[1]


def merge_lora(base_dir: Path, adapter_dir: Path, dest: Path) -> None:
    """Merge a PEFT-format LoRA adapter into the base weights; save safetensors + tokenizer to ``dest``."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=torch.bfloat16, use_safetensors=True, trust_remote_code=False
    )
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    merged.save_pretrained(dest, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir, trust_remote_code=False).save_pretrained(dest)


def collect_weights(outputs: Path, dest: Path, *, lora: bool) -> int:
    """Put the final weights (LoRA merged) into ``dest``; returns the checkpoint's step.

    With LoRA, prime-rl's ``weights/step_N`` holds the base weights and ``lora_adapters/`` the
    adapter (``save_adapter_separately``): they are merged here, so ``dest`` is a plain model.
    """
    src = final_weights_dir(outputs)
    dest.mkdir(parents=True, exist_ok=True)
    if lora:
        adapter = src / "lora_adapters"
        if not (adapter / "adapter_model.safetensors").is_file():
            raise PrimeRLRunError(f"a LoRA run left no adapter in {adapter}")
        merge_lora(src, adapter, dest)
    else:
        files = [p for p in src.iterdir() if p.is_file() and p.name != "STABLE"]
        if not any(p.suffix == ".safetensors" for p in files):
            raise PrimeRLRunError(f"{src} holds no safetensors weights")
        for p in files:
            shutil.copy2(p, dest / p.name)
    return int(src.name.removeprefix("step_"))


WEIGHT_COPIES = (
    "weights",
    "checkpoints",
    f"{ORCHESTRATOR_SUBDIR}/broadcasts",
    f"{ORCHESTRATOR_SUBDIR}/checkpoints",
)
"""prime-rl's folders of weights and checkpoints under ``output_dir``: copies of what ``model/`` holds
after ``collect_weights`` (the broadcasts are the per-step weights sent to vLLM)."""


def drop_weight_copies(outputs: Path) -> list[str]:
    """Delete prime-rl's weight and checkpoint folders once ``model/`` holds the final weights, so a
    pod's result (shipped back without ``train/model/`` unless asked) does not carry gigabytes of
    copies; returns the folders deleted. Logs and saved rollouts stay."""
    dropped = []
    for rel in WEIGHT_COPIES:
        path = outputs / rel
        if path.is_dir():
            shutil.rmtree(path)
            dropped.append(rel)
    return dropped


# -- training ----------------------------------------------------------------------------------


def train(
    bundle_dir: Path,
    out_dir: Path,
    model_ref: str,
    *,
    wall_seconds: float,
    gpus: GpuSplit | None = None,
    prime_rl_dir: str | os.PathLike[str] | None = None,
    poll_seconds: float = 1.0,
    stop_grace_seconds: float = 30.0,
) -> dict[str, Any]:
    """Train one bundle with prime-rl; writes ``metrics.jsonl``, ``samples.jsonl`` (from prime-rl's
    saved training rollouts), ``model/`` and ``prime-rl/`` (its config, logs and rollouts; its
    weight copies are deleted once ``model/`` holds the weights) in ``out_dir``.

    Returns the TRL backend's summary keys (``train_seconds``, ``setup_seconds``, ``steps``,
    ``dataset_size`` (None: prime-rl does not report it), ``history``). Raises PrimeRLConfigError,
    PrimeRLRunError, PrimeRLSetupError or TrainingTimeout (the run is stopped first).
    """
    t0 = time.monotonic()
    deadline = t0 + wall_seconds
    bundle_dir, out_dir = Path(bundle_dir).resolve(), Path(out_dir).resolve()
    manifest = load_bundle(bundle_dir)
    checkout = prime_rl_checkout(prime_rl_dir)
    work = out_dir / "prime-rl"
    outputs = work / "outputs"
    env_dir = work / "env"
    module = stage_environment(bundle_dir / "workspace", manifest.job, manifest.job_id, env_dir)
    config = work / "job.toml"
    config.write_text(render_config(manifest, model_ref, outputs, gpus))
    dry_run(config, prime_rl_dir=checkout, timeout=max(1.0, deadline - time.monotonic()))

    metrics = out_dir / "metrics.jsonl"
    metrics.write_text("")
    parser = ProgressParser(manifest.job.train.max_steps)
    tails = [LogTail(outputs / "logs" / "orchestrator.log"), LogTail(outputs / "logs" / "trainer.log")]
    log = work / "rl.log"

    def pump() -> None:
        rows = [row for tail in tails for line in tail.lines() for row in parser.feed(line)]
        if rows:
            with metrics.open("a") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in rows)

    t_train = time.monotonic()
    proc = _run_rl(config, checkout, env_dir, log)
    while proc.poll() is None:
        pump()
        if time.monotonic() > deadline:
            _stop(proc, stop_grace_seconds)
            pump()
            raise TrainingTimeout(
                f"prime-rl ran past the {wall_seconds:.0f}s wall budget and was stopped "
                f"(module {module}; log {log})"
            )
        time.sleep(poll_seconds)
    train_seconds = time.monotonic() - t_train
    pump()
    with metrics.open("a") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in parser.flush())
    if proc.returncode != 0:
        text = log.read_text(errors="replace")
        for name in ("orchestrator.log", "trainer.log"):
            path = outputs / "logs" / name
            if path.exists():
                text += "\n" + path.read_text(errors="replace")[-20000:]
        reasons = describe_failure(text)
        raise PrimeRLRunError(f"`uv run rl` exited with code {proc.returncode}: " + "; ".join(reasons))
    steps = collect_weights(outputs, out_dir / "model", lora=manifest.job.train.lora is not None)
    drop_weight_copies(outputs)
    append_samples(out_dir / "samples.jsonl", prime_rl_rows(outputs / ORCHESTRATOR_SUBDIR / "rollouts"))
    history = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    return {
        "train_seconds": train_seconds,
        "setup_seconds": t_train - t0,
        "steps": steps,
        "dataset_size": None,
        "history": history,
    }


@attrs.frozen
class TrainOutcome:
    """What the runner reads from a training phase (the fields of a ``SandboxResult`` it uses)."""

    ok: bool
    value: Any
    error: str | None
    stdout: str
    stderr: str
    timed_out: bool = False
    """The run went past its wall and was stopped (``TrainingTimeout``)."""


def run_training(bundle_dir: Path, out_dir: Path, model_ref: str, *, wall_seconds: float) -> TrainOutcome:
    """``train`` for the runner: never raises; the run's log comes back as ``stdout``."""
    timed_out = False
    try:
        value = train(bundle_dir, out_dir, model_ref, wall_seconds=wall_seconds)
        ok, error = True, None
    except Exception as exc:
        value, ok, error = None, False, f"{type(exc).__name__}: {exc}"
        timed_out = isinstance(exc, TrainingTimeout)
    log = Path(out_dir) / "prime-rl" / "rl.log"
    stdout = log.read_text(errors="replace") if log.exists() else ""
    return TrainOutcome(ok, value, error, stdout, "", timed_out)


def resolve_model_ref(model: str) -> str:
    """An embedded model key -> its prepared directory; anything else is a Hugging Face id."""
    from metatrain.models import get_model, prepare_model

    try:
        get_model(model)
    except KeyError:
        return model
    return str(prepare_model(model))


# -- hidden eval through vLLM ------------------------------------------------------------------


def vllm_executable(prime_rl_dir: str | os.PathLike[str] | None = None) -> str:
    """``$METATRAIN_VLLM_BIN``, else the prime-rl checkout's ``.venv/bin/vllm``, else ``vllm`` on PATH."""
    if found := os.environ.get("METATRAIN_VLLM_BIN"):
        return found
    raw = prime_rl_dir if prime_rl_dir is not None else os.environ.get(PRIME_RL_DIR_ENV)
    if raw and (candidate := Path(raw) / ".venv" / "bin" / "vllm").exists():
        return str(candidate)
    if found := shutil.which("vllm"):
        return found
    raise PrimeRLSetupError("no vLLM: set METATRAIN_VLLM_BIN or install prime-rl (docs/prime-rl.md)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define
class VllmServer:
    """``vllm serve MODEL`` on loopback (weights only, the project's tool-call parser), as a context."""

    model: str
    max_model_len: int = 4096
    startup_seconds: float = 900.0
    log: Path | None = None
    served_name: str = "metatrain-eval"
    port: int = attrs.field(factory=_free_port)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            vllm_executable(),
            "serve",
            self.model,
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--served-model-name={self.served_name}",
            f"--max-model-len={self.max_model_len}",
            "--load-format=safetensors",
            "--generation-config=vllm",
            "--enable-auto-tool-choice",
            f"--tool-call-parser={TOOL_CALL_PARSER}",
            "--seed=0",
        ]

    def __enter__(self) -> VllmServer:
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            self.command(),
            env=child_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + self.startup_seconds
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PrimeRLSetupError(f"vllm serve exited with code {self._proc.returncode} during startup")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(2.0)
        self.__exit__()
        raise PrimeRLSetupError(f"vllm serve did not answer within {self.startup_seconds:.0f}s")

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            _stop(self._proc, 30.0)


def _wire_call(call_id: str, call: ParsedCall) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def _api_calls(tool_calls: Sequence[Any] | None) -> tuple[list[tuple[str, ParsedCall]], int]:
    """Server-parsed tool calls -> (id, call) pairs and the number whose arguments were not an object."""
    calls: list[tuple[str, ParsedCall]] = []
    malformed = 0
    for i, tc in enumerate(tool_calls or ()):
        fn = getattr(tc, "function", None)
        if fn is None:
            malformed += 1
            continue
        try:
            args = json.loads(fn.arguments) if isinstance(fn.arguments, str) else fn.arguments
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            malformed += 1
            continue
        calls.append((getattr(tc, "id", None) or f"call_{i}", ParsedCall(fn.name or "", args)))
    return calls, malformed


def chat_rollout(
    client: Any,
    model: str,
    conversation: list[dict[str, Any]],
    tools: Mapping[str, Callable[..., Any]],
    tool_schemas: list[dict[str, Any]],
    *,
    max_turns: int,
    max_tokens: int,
    final_answer_turn: bool = False,
) -> Any:
    """Play one conversation through an OpenAI-compatible chat API with greedy decoding.

    Tool calls the server parsed are used as given; when it parsed none, the reply text goes
    through the project dialect's lenient parser (bare or fenced JSON), as on the transformers path.
    """
    from metatrain.training.rollout import Rollout, start_turn

    r = Rollout(messages=[dict(m) for m in conversation])
    for turn in range(max_turns):
        final = start_turn(final_answer_turn, turn, max_turns, r.messages)
        tool_args: dict[str, Any] = {} if final else {"tools": tool_schemas, "tool_choice": "auto"}
        resp = client.chat.completions.create(
            model=model,
            messages=r.messages,
            temperature=0.0,
            max_tokens=max_tokens,
            **tool_args,
        )
        message = resp.choices[0].message
        calls, malformed = _api_calls(message.tool_calls)
        content = message.content or ""
        if not calls:
            parsed = parse_assistant(content)
            content, malformed = parsed.content, malformed + parsed.malformed
            calls = [(f"call_{turn}_{i}", c) for i, c in enumerate(parsed.calls)]
        usage = getattr(resp, "usage", None)
        r.turns += 1
        r.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        r.malformed += malformed
        r.final_text = content
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            assistant["tool_calls"] = [_wire_call(cid, c) for cid, c in calls]
        r.messages.append(assistant)
        if not calls:
            break
        if turn == max_turns - 1:
            r.tool_calls += len(calls)
            break
        for cid, c in calls:
            result, ok = call_tool(dict(tools), c)
            r.tool_calls += 1
            r.tool_errors += 0 if ok else 1
            r.messages.append({"role": "tool", "tool_call_id": cid, "content": result})
    return r


def evaluate_with_vllm(
    family: Any,
    budget: str,
    model: str,
    *,
    base_url: str | None = None,
    served_model: str | None = None,
    limit: int | None = None,
    concurrency: int = 32,
    on_progress: Callable[[int], None] | None = None,
    server_log: Path | None = None,
) -> Any:
    """Score ``model`` on the family's hidden eval; starts ``vllm serve`` unless ``base_url`` is given."""
    from openai import OpenAI

    from metatrain.training.evaluation import eval_conversation, score_rollouts, tool_schemas

    t0 = time.monotonic()
    spec = family.task_spec(budget)
    examples = family.hidden_eval(budget)
    examples = examples[:limit] if limit else examples
    schemas = tool_schemas(spec)

    def score_with(url: str, name: str | None) -> list[Any]:
        client = OpenAI(base_url=url, api_key="EMPTY", timeout=600.0, max_retries=2)
        name = name or client.models.list().data[0].id

        def one(ex: Any) -> Any:
            rollout = chat_rollout(
                client,
                name,
                eval_conversation(spec, ex),
                {fn.__name__: fn for fn in family.tools_for(ex)},
                schemas,
                max_turns=spec.eval.max_turns,
                max_tokens=spec.eval.max_tokens,
                final_answer_turn=spec.eval.final_answer_turn,
            )
            if on_progress is not None:
                on_progress(1)
            return rollout

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(one, examples))

    if base_url is not None:
        rollouts = score_with(base_url, served_model)
    else:
        max_len = primerl_seq_len(spec.eval.max_tokens * spec.eval.max_turns)
        with VllmServer(model, max_model_len=max_len, log=server_log) as server:
            rollouts = score_with(server.url, server.served_name)
    return score_rollouts(family, examples, rollouts, t0)


def main(argv: list[str] | None = None) -> int:
    """The vLLM eval process: the same arguments and ``eval_batch`` events as training.evaluation."""
    parser = argparse.ArgumentParser(description="Score a model on a family's hidden eval through vLLM")
    parser.add_argument("--model", required=True)
    parser.add_argument("--family", required=True)
    parser.add_argument("--budget", default="fast")
    parser.add_argument("--device", default="cuda", help="ignored: vLLM picks its GPU")
    parser.add_argument("--batch-size", type=int, default=32, help="concurrent conversations")
    parser.add_argument("--base-url", default=None, help="use this server instead of starting vllm serve")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    from metatrain.plugins import load_plugins

    family = load_plugins().task_family(args.family)
    done = 0

    def progress(k: int) -> None:
        nonlocal done
        done += k
        print(json.dumps({"event": "eval_batch", "done": done}), flush=True)

    report = evaluate_with_vllm(
        family,
        args.budget,
        args.model,
        base_url=args.base_url,
        concurrency=args.batch_size,
        on_progress=progress,
        server_log=args.out.with_suffix(".vllm.log"),
    )
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.to_json()))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
