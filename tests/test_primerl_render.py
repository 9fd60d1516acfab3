"""The prime-rl backend without GPUs: rendered configs against prime-rl v0.6.0's schema (extracted
from its pydantic models by scripts/extract_primerl_schema.py), the shared TRL/prime-rl mapping,
dry-run/train error handling against a fake ``uv``, and vLLM-style eval against a scripted server."""

from __future__ import annotations

import json
import os
import stat
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import ScriptedServer, turn

from metatrain.jobs.bundle import make_bundle
from metatrain.plugins import load_plugins
from metatrain.specs import JobFile, TaskSpec, TrainingTable, parse_job_toml
from metatrain.training import primerl_backend as prl
from metatrain.training.table import (
    MAPPING,
    PRIMERL_PROMPT_ALLOWANCE,
    TRL_OPTIM,
    UnsupportedSetting,
    primerl_values,
    trl_config_kwargs,
    trl_values,
)

SCHEMA = json.loads((Path(__file__).parent / "data" / "primerl_v0.6.0_schema.json").read_text())
FAMILIES = ("calc_chain", "ledger", "dispatch", "triage", "multi_hop", "string_pipeline")
MODEL_REFS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "/models/smollm2-135m")

# -- schema checking -------------------------------------------------------------------------


def _scalar_ok(value: Any, name: str) -> bool:
    if name == "Any":
        return True
    if name == "bool":
        return isinstance(value, bool)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def check_value(value: Any, t: dict[str, Any], path: str) -> list[str]:
    """Errors of ``value`` against a schema type (models, unions, literals, bounds, required keys)."""
    kind = t["kind"]
    errors: list[str] = []
    if kind == "model":
        if not isinstance(value, dict):
            return [f"{path}: expected a table for {t['name']}, got {value!r}"]
        return check_table(value, t["name"], f"{path}.")
    if kind == "union":
        disc = t.get("discriminator")
        if disc and isinstance(value, dict):
            for option in t["options"]:
                field = SCHEMA["models"][option["name"]]["fields"][disc]
                if value.get(disc, field.get("default")) in field["type"]["values"]:
                    return check_value(value, option, path)
            return [f"{path}.{disc}: {value.get(disc)!r} matches no variant"]
        options = [o for o in t["options"] if o["kind"] != "none"] if value != "None" else t["options"]
        if len(options) == 1:
            return check_value(value, options[0], path)
        results = [check_value(value, o, path) for o in options]
        return [] if any(not r for r in results) else [f"{path}: {value!r} fits none of {t['options']}"]
    if kind == "literal":
        return [] if value in t["values"] else [f"{path}: {value!r} not one of {t['values']}"]
    if kind == "none":
        return [] if value == "None" else [f"{path}: {value!r} is not None"]
    if kind == "scalar" and not _scalar_ok(value, t["name"]):
        errors.append(f"{path}: {value!r} is not {t['name']}")
    if kind == "list":
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        for i, item in enumerate(value):
            errors += check_value(item, t["item"], f"{path}[{i}]")
    if kind == "dict" and not isinstance(value, dict):
        errors.append(f"{path}: expected a table")
    return errors


def check_bounds(value: Any, field: dict[str, Any], path: str) -> list[str]:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return []
    tests = {"ge": value >= field.get("ge", value), "le": value <= field.get("le", value)}
    if "gt" in field:
        tests["gt"] = value > field["gt"]
    if "lt" in field:
        tests["lt"] = value < field["lt"]
    return [f"{path} = {value} violates {k} {field[k]}" for k, ok in tests.items() if not ok and k in field]


def check_table(doc: dict[str, Any], model: str, prefix: str = "") -> list[str]:
    fields = SCHEMA["models"][model]["fields"]
    errors = [
        f"{prefix}{k}: required key missing" for k, f in fields.items() if f["required"] and k not in doc
    ]
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if key not in fields:
            errors.append(f"{path}: not a key of {model}")
            continue
        errors += check_value(value, fields[key]["type"], path)
        errors += check_bounds(value, fields[key], path)
    return errors


def _descend(doc: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key path in ``doc`` (list items as ``[]``), not entering free-form tables (env ``args``)."""
    known = set(SCHEMA["paths"])
    paths = []
    for k, v in doc.items():
        path = prefix + k
        paths.append(path)
        if isinstance(v, dict) and any(p.startswith(path + ".") for p in known):
            paths += _descend(v, f"{path}.")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                paths += _descend(item, f"{path}[].")
    return paths


def test_schema_fixture_comes_from_the_pinned_commit() -> None:
    assert SCHEMA["source"]["commit"] == prl.PRIME_RL_COMMIT
    assert SCHEMA["root"] == "rl.RLConfig"
    rl = SCHEMA["models"]["rl.RLConfig"]["fields"]
    assert rl["trainer"]["required"] and rl["orchestrator"]["required"]
    env = SCHEMA["models"]["orchestrator.TrainEnvConfig"]["fields"]
    assert env["group_size"]["ge"] == 1 and "rollouts_per_example" in env["group_size"]["aliases"]
    assert set(SCHEMA["models"]["rl.SharedWeightBroadcastConfig"]["fields"]["type"]["type"]["values"]) == {
        "nccl",
        "filesystem",
    }


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"trainer": {}}, "orchestrator: required key missing"),
        ({"trainer": {}, "orchestrator": {}, "nonsense": 1}, "nonsense: not a key of rl.RLConfig"),
        ({"trainer": {}, "orchestrator": {"batch_size": 0}}, "orchestrator.batch_size = 0 violates ge 1"),
        ({"trainer": {"optim": {"type": "adafactor"}}, "orchestrator": {}}, "matches no variant"),
        ({"trainer": {"optim": {"type": "sgd", "betas1": 0.9}}, "orchestrator": {}}, "not a key of"),
        ({"trainer": {}, "orchestrator": {}, "weight_broadcast": {"type": "ftp"}}, "'ftp' not one of"),
        ({"trainer": {}, "orchestrator": {}, "max_steps": "ten"}, "is not int"),
        ({"trainer": {}, "orchestrator": {}, "deployment": {"type": "multi_node"}}, "num_train_nodes"),
    ],
)
def test_schema_checker_rejects_bad_configs(doc: dict[str, Any], expected: str) -> None:
    errors = check_table(doc, SCHEMA["root"])
    assert any(expected in e for e in errors), errors


# -- rendering -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plugins() -> Any:
    return load_plugins()


def _bundle(tmp: Path, plugins: Any, family: str, budget: str, **train: Any) -> tuple[Path, Any]:
    fam = plugins.task_family(family)
    spec: TaskSpec = fam.task_spec(budget)
    ws = tmp / f"ws-{family}-{budget}"
    ws.mkdir()
    files = fam.reference_job(budget)
    for name, text in files.items():
        (ws / name).write_text(text)
    job = parse_job_toml(files["job.toml"])
    if train:
        job = JobFile.model_validate({**job.model_dump(), "train": {**job.train.model_dump(), **train}})
    dest = make_bundle(tmp / f"bundle-{family}-{budget}", ws, job, spec, f"Job-{family}/{budget}", "run-1")
    from metatrain.jobs.bundle import load_bundle

    return dest, load_bundle(dest)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("budget", ["fast", "full"])
def test_reference_jobs_render_valid_configs(tmp_path: Path, plugins: Any, family: str, budget: str) -> None:
    _, manifest = _bundle(tmp_path, plugins, family, budget)
    table = manifest.job.train
    for ref in MODEL_REFS:
        text = prl.render_config(manifest, ref, tmp_path / "out", prl.GpuSplit())
        doc = tomllib.loads(text)
        assert check_table(doc, SCHEMA["root"]) == []
        known = set(SCHEMA["paths"])
        assert [p for p in _descend(doc) if p not in known] == []
        # the table's values at their prime-rl paths
        assert doc["max_steps"] == table.max_steps
        assert doc["orchestrator"]["group_size"] == table.rollouts_per_example
        assert doc["orchestrator"]["batch_size"] == table.batch_size * table.rollouts_per_example
        sampling = doc["orchestrator"]["train"]["sampling"]
        # each turn as the eval caps it (per turn in prime-rl); all turns together at the env
        assert manifest.turn_max_tokens == plugins.task_family(family).task_spec(budget).eval.max_tokens
        per_turn = min(table.max_tokens, manifest.turn_max_tokens)
        assert sampling == {"temperature": table.temperature, "max_completion_tokens": per_turn}
        assert doc["trainer"]["optim"]["lr"] == table.lr
        if table.lora is not None:
            assert doc["trainer"]["model"]["lora"]["rank"] == table.lora.rank
            assert doc["trainer"]["ckpt"]["weights"]["save_adapter_separately"] is True
        # what the pod needs
        (env,) = doc["orchestrator"]["train"]["env"]
        assert env["id"] == prl.env_module_name(manifest.job_id) and env["args"] == manifest.job.env_args
        assert env["max_total_completion_tokens"] == table.max_tokens
        assert "/" not in env["id"] and env["id"].isidentifier()
        assert doc["weight_broadcast"] == {"type": "filesystem"}
        assert doc["deployment"] == {
            "type": "single_node",
            "num_infer_gpus": 1,
            "num_train_gpus": 1,
            "gpus_per_node": 2,
        }
        assert doc["model"]["name"] == ref and doc["output_dir"] == str(tmp_path / "out")
        assert doc["ckpt"] == {} and doc["trainer"]["ckpt"]["weights_only"] is True
        # cross-field rules prime-rl's validators enforce
        assert doc["orchestrator"]["batch_size"] % doc["orchestrator"]["group_size"] == 0
        assert doc["seq_len"] >= table.max_tokens + PRIMERL_PROMPT_ALLOWANCE and doc["seq_len"] % 512 == 0
        assert doc["inference"]["model"]["max_model_len"] == doc["seq_len"]
        if ref in prl.AUTO_RENDERER_MODELS:
            assert "renderer" not in doc["orchestrator"]
        else:
            assert doc["orchestrator"]["renderer"] == "None"
            assert doc["inference"]["model"]["tool_call_parser"] == "hermes"


def test_render_full_finetune_schedulers_and_gpus(tmp_path: Path, plugins: Any) -> None:
    _, manifest = _bundle(
        tmp_path, plugins, "calc_chain", "full", lora=None, scheduler="linear", warmup=5, optimizer="sgd"
    )
    doc = tomllib.loads(prl.render_config(manifest, "Qwen/Qwen3-1.7B", tmp_path, prl.GpuSplit(2, 3)))
    assert check_table(doc, SCHEMA["root"]) == []
    assert "model" not in doc["trainer"] and "weights" not in doc["trainer"]["ckpt"]
    sched = doc["trainer"]["scheduler"]
    assert sched == {"type": "linear", "warmup_steps": 5, "decay_steps": 40 - 5, "min_lr": 0.0}
    assert doc["trainer"]["optim"] == {
        "type": "sgd",
        "lr": manifest.job.train.lr,
        "weight_decay": 0.0,
        "momentum": 0.0,
        "nesterov": False,
    }
    assert doc["deployment"]["num_infer_gpus"] == 2 and doc["deployment"]["gpus_per_node"] == 5
    with pytest.raises(ValueError, match=r">= 1 inference"):
        prl.GpuSplit(0, 1)


def test_render_refuses_what_prime_rl_cannot_express(tmp_path: Path, plugins: Any) -> None:
    _, manifest = _bundle(tmp_path, plugins, "calc_chain", "fast", optimizer="adafactor")
    with pytest.raises(UnsupportedSetting, match=r"adafactor.*no prime-rl v0\.6\.0 equivalent.*adamw"):
        prl.render_config(manifest, "Qwen/Qwen3-0.6B", tmp_path)


# -- the shared mapping ----------------------------------------------------------------------


def _tables() -> list[TrainingTable]:
    out = []
    for opt in ("adamw", "adamw_8bit", "sgd"):
        for sched in ("constant", "linear", "cosine"):
            for lora in (None, {"rank": 4, "alpha": 8, "dropout": 0.05}):
                out.append(
                    TrainingTable(
                        model="m",
                        max_steps=12,
                        rollouts_per_example=4,
                        batch_size=3,
                        max_tokens=700,
                        temperature=0.7,
                        lr=3e-5,
                        optimizer=opt,
                        scheduler=sched,
                        warmup=2,
                        loss="dapo",
                        lora=lora,
                    )
                )
    return out


@pytest.mark.parametrize(
    "table", _tables(), ids=lambda t: f"{t.optimizer}-{t.scheduler}-{t.lora is not None}"
)
def test_trl_and_primerl_values_agree(table: TrainingTable) -> None:
    trl = trl_config_kwargs(table, output_dir="o", device="cuda", max_turns=3)
    assert {k: trl[k] for k in trl_values(table)} == trl_values(table)
    p = primerl_values(table)
    assert trl["num_generations"] == p["orchestrator.group_size"]
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] == 12
    assert p["orchestrator.batch_size"] == 12 and trl["per_device_train_batch_size"] == trl["num_generations"]
    assert trl["max_completion_length"] == p["orchestrator.train.sampling.max_completion_tokens"]
    assert p["orchestrator.train.env[0].max_total_completion_tokens"] == 700 and p["seq_len"] == 2560
    assert trl["temperature"] == p["orchestrator.train.sampling.temperature"]
    assert trl["learning_rate"] == p["trainer.optim.lr"] == p["orchestrator.optim.lr"]
    assert trl["max_steps"] == p["max_steps"]
    assert TRL_OPTIM[table.optimizer].startswith(p["trainer.optim.type"])
    assert p["trainer.loss.type"] == "default" and trl["loss_type"] == "dapo"
    if table.scheduler == "constant":
        assert p["trainer.scheduler.type"] == "constant" and "trainer.scheduler.warmup_steps" not in p
    else:
        assert p["trainer.scheduler.type"] == trl["lr_scheduler_type"]
        assert p["trainer.scheduler.warmup_steps"] == trl["warmup_steps"]
    if table.lora is None:
        assert not any(k.startswith("trainer.model.lora") for k in p)
    else:
        assert (p["trainer.model.lora.rank"], p["trainer.model.lora.alpha"]) == (4, 8.0)


def test_every_mapping_row_declares_what_it_sets_and_paths_exist() -> None:
    known = set(SCHEMA["paths"])
    assert [row.key for row in MAPPING][:2] == ["model", "max_steps"]
    for table in _tables():
        for row in MAPPING:
            assert set(row.to_trl(table)) <= set(row.trl_keys), row.key
            assert set(row.to_primerl(table)) <= set(row.primerl_keys), row.key
    for row in MAPPING:
        for path in row.primerl_keys:
            assert path.replace("[0]", "[]") in known, path


# -- dry run and training against a fake uv ----------------------------------------------------

ORCH_LINE = (
    "Step {step} | {time} | Reward {reward:.4f} | Trainable {ok}/{n} ({pct:.1f}%) | Turns 2.5 | "
    "Max Off-Policy 1 | Error {error:.1f}% | Truncation 12.5%"
)
TRAINER_LINE = (
    "Step {step} | {time} | Loss {loss:.4f} | Entropy 0.5000 | Mismatch KL 0.0010 | Grad. Norm 1.2000 | "
    "LR 5.00e-05 | Throughput 100 tokens/s"
)


def orch_line(step: int, time: str, reward: float, ok: int = 6, n: int = 8, error: float = 0.0) -> str:
    return ORCH_LINE.format(
        step=step, time=time, reward=reward, ok=ok, n=n, pct=100 * ok / n if n else 0.0, error=error
    )


FAKE_UV = """\
#!{python}
import json, os, sys, time, tomllib
from pathlib import Path

here = Path(__file__).parent
mode = (here / "mode").read_text().strip()
args = sys.argv[1:]
record = {{"args": args, "env": dict(os.environ), "cwd": os.getcwd()}}
(here / "calls.jsonl").open("a").write(json.dumps(record) + "\\n")
(here / "pid").write_text(str(os.getpid()))
if mode == "nospawn":
    print("error: Failed to spawn: `rl`", file=sys.stderr)
    print("  Caused by: No such file or directory (os error 2)", file=sys.stderr)
    sys.exit(2)
assert args[:3] == ["run", "rl", "@"], args
cfg = tomllib.loads(Path(args[3]).read_text())
out = Path(cfg["output_dir"])
if "--dry-run" in args:
    if mode == "invalid":
        print("\\x1b[31mpydantic_core.ValidationError: 2 validation errors for RLConfig\\x1b[0m")
        print("orchestrator.batch_size")
        print("  Input should be greater than or equal to 1 [type=greater_than_equal]")
        print("    For further information visit https://errors.pydantic.dev/2.11/v/greater_than_equal")
        print("trainer.optim.type")
        print("  Input should be 'adamw' or 'sgd' [type=literal_error, input_value='x']")
        sys.exit(1)
    (out / "configs").mkdir(parents=True, exist_ok=True)
    for name in ("trainer", "orchestrator", "inference"):
        (out / "configs" / (name + ".toml")).write_text("# resolved\\n")
    sys.exit(0)
logs = out / "logs"
logs.mkdir(parents=True, exist_ok=True)
if mode == "hang":
    time.sleep(120)
if mode == "crash":
    trace = "Traceback (most recent call last):\\n  File x\\ntorch.OutOfMemoryError: CUDA out of memory\\n"
    (logs / "trainer.log").write_text(trace)
    sys.exit(1)
steps = cfg["max_steps"]
with (logs / "orchestrator.log").open("w") as orch, (logs / "trainer.log").open("w") as tr:
    for s in range(steps):
        line = {orch!r}.format(step=s, time="1.5s", reward=0.25 * s, ok=6, n=8, pct=75.0, error=0.0)
        orch.write("\\x1b[32m12:00:00\\x1b[0m SUCCESS " + line + "\\n")
        orch.flush()
        tr.write("SUCCESS " + {trainer!r}.format(step=s, time="350ms", loss=-0.1 * s) + "\\n")
        tr.flush()
        # prime-rl's save_rollouts: verifiers RolloutOutput dicts + its metadata, one JSON line each
        rollouts = out / "run_default" / "rollouts" / ("step_" + str(s))
        rollouts.mkdir(parents=True)
        with (rollouts / "train_rollouts.jsonl").open("w") as fh:
            for i in range(8):
                fh.write(json.dumps({{
                    "example_id": i // 4, "prompt": [{{"role": "user", "content": "q" + str(i // 4)}}],
                    "completion": [{{"role": "assistant", "content": "<answer>" + str(i) + "</answer>"}}],
                    "reward": float(i == 5), "metrics": {{"correct_answer": float(i == 5)}},
                    "is_completed": True, "is_truncated": False, "advantage": 0.9 if i == 5 else -0.1,
                    "group_id": "g" + str(i // 4), "policy_version": s,
                }}) + "\\n")
            fh.write('{{"example_id": 9, "prompt": [')  # a run stopped mid-write
        time.sleep(0.05)
for copy in ("checkpoints/step_1", "run_default/broadcasts/step_1"):  # more weight copies
    (out / copy).mkdir(parents=True)
    (out / copy / "model.safetensors").write_bytes(b"copy")
step_dir = out / "weights" / ("step_" + str(steps))
step_dir.mkdir(parents=True)
(step_dir / "model.safetensors").write_bytes(b"weights")
(step_dir / "config.json").write_text("{{}}")
(step_dir / "tokenizer.json").write_text("{{}}")
(step_dir / "STABLE").touch()
"""


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(FAKE_UV.format(python=sys.executable, orch=ORCH_LINE, trainer=TRAINER_LINE))
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "mode").write_text("ok")
    checkout = tmp_path / "prime-rl"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text('[project]\nname = "prime-rl"\nversion = "0.6.0"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(prl.PRIME_RL_DIR_ENV, str(checkout))
    monkeypatch.delenv("METATRAIN_UV_BIN", raising=False)
    monkeypatch.setenv("METATRAIN_EVAL_SECRET", "do-not-leak-1234")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-do-not-leak")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return bin_dir


def _calls(bin_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]


def _write_config(tmp_path: Path, plugins: Any, **train: Any) -> tuple[Path, Any]:
    _, manifest = _bundle(tmp_path, plugins, "calc_chain", "fast", **train)
    cfg = tmp_path / "job.toml"
    cfg.write_text(prl.render_config(manifest, "Qwen/Qwen3-0.6B", tmp_path / "outputs"))
    return cfg, manifest


def test_dry_run_ok_runs_uv_in_the_checkout(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    cfg, _ = _write_config(tmp_path, plugins)
    configs = prl.dry_run(cfg)
    assert configs == tmp_path / "outputs" / "configs" and (configs / "trainer.toml").exists()
    (c,) = _calls(fake_uv)
    assert c["args"] == ["run", "rl", "@", str(cfg), "--dry-run"]
    assert Path(c["cwd"]).resolve() == Path(os.environ[prl.PRIME_RL_DIR_ENV]).resolve()


def test_dry_run_reports_each_validation_error(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    (fake_uv / "mode").write_text("invalid")
    cfg, _ = _write_config(tmp_path, plugins)
    with pytest.raises(prl.PrimeRLConfigError) as info:
        prl.dry_run(cfg)
    assert info.value.errors == [
        "orchestrator.batch_size: Input should be greater than or equal to 1",
        "trainer.optim.type: Input should be 'adamw' or 'sgd'",
    ]
    assert "prime-rl rejected the config" in str(info.value)


def test_dry_run_setup_errors(
    tmp_path: Path, plugins: Any, fake_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, _ = _write_config(tmp_path, plugins)
    (fake_uv / "mode").write_text("nospawn")
    with pytest.raises(prl.PrimeRLSetupError, match="Failed to spawn"):
        prl.dry_run(cfg)
    with pytest.raises(prl.PrimeRLSetupError, match="not a prime-rl checkout"):
        prl.dry_run(cfg, prime_rl_dir=tmp_path)
    monkeypatch.delenv(prl.PRIME_RL_DIR_ENV)
    with pytest.raises(prl.PrimeRLSetupError, match=prl.PRIME_RL_DIR_ENV):
        prl.dry_run(cfg)
    monkeypatch.setenv(prl.PRIME_RL_DIR_ENV, str(tmp_path / "prime-rl"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(prl.PrimeRLSetupError, match="uv is not on PATH"):
        prl.dry_run(cfg)


def test_train_streams_metrics_and_collects_weights(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    bundle, manifest = _bundle(tmp_path, plugins, "calc_chain", "full", lora=None, max_steps=3)
    out = tmp_path / "result" / "train"
    summary = prl.train(bundle, out, "Qwen/Qwen3-0.6B", wall_seconds=60, poll_seconds=0.05)
    assert summary["steps"] == 3 and summary["dataset_size"] is None
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows == summary["history"]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["max_steps"] == 3 for r in rows)
    assert [r["reward"] for r in rows] == [0.0, 0.25, 0.5]
    assert [r["loss"] for r in rows] == [0.0, -0.1, -0.2]
    first = rows[0]
    assert first["step_time"] == 1.5 and first["train_step_time"] == 0.35 and first["learning_rate"] == 5e-05
    assert (
        first["trainable_fraction"] == 0.75
        and first["truncation_rate"] == 0.125
        and first["grad_norm"] == 1.2
    )
    outputs = out / "prime-rl" / "outputs"
    assert not any((outputs / rel).exists() for rel in prl.WEIGHT_COPIES)  # model/ holds the weights
    assert (outputs / "logs" / "trainer.log").is_file() and (outputs / "run_default" / "rollouts").is_dir()
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["index"]) for r in samples] == [(k, i) for k in (1, 2, 3) for i in (0, 2, 4, 5, 6)]
    best = samples[3]
    assert best["question"] == "q1" and best["completion"][0]["content"] == "<answer>5</answer>"
    assert best["rewards"] == {"correct_answer": 1.0} and best["advantage"] == 0.9
    assert sorted(p.name for p in (out / "model").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    # what the pod got: a dry run first, then the run; the env module staged on PYTHONPATH; no secrets
    dry, run = _calls(fake_uv)
    assert "--dry-run" in dry["args"] and run["args"] == [
        "run",
        "rl",
        "@",
        str(out / "prime-rl" / "job.toml"),
    ]
    module = prl.env_module_name(manifest.job_id)
    assert run["env"]["PYTHONPATH"] == str(out / "prime-rl" / "env")
    assert (out / "prime-rl" / "env" / f"{module}.py").read_text() == (
        bundle / "workspace" / "env.py"
    ).read_text()
    for call_ in (dry, run):
        assert "METATRAIN_EVAL_SECRET" not in call_["env"] and "OPENROUTER_API_KEY" not in call_["env"]
        assert "do-not-leak" not in json.dumps(call_["env"]) and call_["env"]["HF_HUB_OFFLINE"] == "1"
    assert "do-not-leak" not in (out / "prime-rl" / "job.toml").read_text()


def test_train_failures_are_clear(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    bundle, _ = _bundle(tmp_path, plugins, "calc_chain", "full", lora=None, max_steps=2)
    (fake_uv / "mode").write_text("crash")
    with pytest.raises(prl.PrimeRLRunError, match=r"code 1: torch\.OutOfMemoryError: CUDA out of memory"):
        prl.train(bundle, tmp_path / "t1", "Qwen/Qwen3-0.6B", wall_seconds=60, poll_seconds=0.05)
    outcome = prl.run_training(bundle, tmp_path / "t2", "Qwen/Qwen3-0.6B", wall_seconds=60)
    assert not outcome.ok and outcome.value is None and "CUDA out of memory" in (outcome.error or "")
    (fake_uv / "mode").write_text("invalid")
    with pytest.raises(prl.PrimeRLConfigError, match="batch_size"):
        prl.train(bundle, tmp_path / "t3", "Qwen/Qwen3-0.6B", wall_seconds=60)


def test_train_enforces_the_wall_budget(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    bundle, _ = _bundle(tmp_path, plugins, "calc_chain", "full", lora=None, max_steps=2)
    (fake_uv / "mode").write_text("hang")
    with pytest.raises(prl.TrainingTimeout, match="wall budget"):
        prl.train(
            bundle, tmp_path / "t", "Qwen/Qwen3-0.6B", wall_seconds=2, poll_seconds=0.05, stop_grace_seconds=2
        )
    pid = int((fake_uv / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_lora_run_without_adapter_is_an_error(tmp_path: Path, plugins: Any, fake_uv: Path) -> None:
    bundle, _ = _bundle(tmp_path, plugins, "calc_chain", "fast", max_steps=1)
    with pytest.raises(prl.PrimeRLRunError, match="left no adapter"):
        prl.train(bundle, tmp_path / "t", "Qwen/Qwen3-0.6B", wall_seconds=60, poll_seconds=0.05)


def test_progress_parser_json_logs_and_partial_steps() -> None:
    p = prl.ProgressParser(max_steps=2)
    assert p.feed(json.dumps({"level": "SUCCESS", "message": orch_line(0, "2m 3s", 0.5, 0, 0, 50.0)})) == []
    (row,) = p.feed("Step 0 | 1h 2m | Loss nan | Entropy 0.1000 | LR 1.00e-06 | MFU 1%")
    assert row["step"] == 1 and row["step_time"] == 123.0 and row["train_step_time"] == 3720.0
    assert "loss" not in row and row["error_rate"] == 0.5 and row["trainable_fraction"] == 0.0
    assert p.feed(orch_line(1, "1.0s", 1.0, 2, 2)) == []
    assert p.feed("unrelated line") == []
    (last,) = p.flush()
    assert last["step"] == 2 and last["reward"] == 1.0 and "loss" not in last
    assert p.flush() == []


def test_describe_failure_prefers_the_real_cause() -> None:
    assert prl.describe_failure("info\nerror: No interpreter found for Python 3.12") == [
        "error: No interpreter found for Python 3.12"
    ]
    text = 'Traceback (most recent call last):\n  File "a"\n    x()\nValueError: bad env\nlater noise'
    assert prl.describe_failure(text) == ["ValueError: bad env"]
    assert prl.describe_failure("") == ["no output"]


def test_env_module_name_is_importable_and_stable() -> None:
    name = prl.env_module_name("Job-42/calc chain.v1")
    assert name == "metatrain_job_job_42_calc_chain_v1" and name.isidentifier()
    assert prl.env_module_name("Job-42/calc chain.v1") == name


# -- LoRA merge (the adapter layout prime-rl writes) -------------------------------------------


def test_merge_lora_applies_the_adapter(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    sizes: dict[str, Any] = {
        "vocab_size": 32,
        "hidden_size": 16,
        "intermediate_size": 32,
        "max_position_embeddings": 64,
    }
    heads: dict[str, Any] = {"num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1}
    cfg = LlamaConfig(**sizes, **heads)
    step = tmp_path / "outputs" / "weights" / "step_3"
    model: Any = LlamaForCausalLM(cfg)
    model = model.to(torch.bfloat16)
    model.save_pretrained(step, safe_serialization=True)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    )
    tok.save_pretrained(step)
    (step / "STABLE").touch()
    adapter = step / "lora_adapters"
    adapter.mkdir()
    a = 0.1 * torch.randn(4, 16)
    b = 0.1 * torch.randn(16, 4)
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file(
        {f"{prefix}.lora_A.weight": a, f"{prefix}.lora_B.weight": b}, adapter / "adapter_model.safetensors"
    )
    (adapter / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "base_model_name_or_path": "x",
                "r": 4,
                "lora_alpha": 8.0,
                "lora_dropout": 0.0,
                "bias": "none",
                "target_modules": ["q_proj"],
                "modules_to_save": None,
            }
        )
    )
    dest = tmp_path / "model"
    assert prl.collect_weights(tmp_path / "outputs", dest, lora=True) == 3
    merged = load_file(str(dest / "model.safetensors"))
    base = load_file(str(step / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    expected = base[key].float() + (8.0 / 4) * (b @ a)
    assert torch.allclose(merged[key].float(), expected, atol=0.01)
    assert not torch.allclose(merged[key].float(), base[key].float(), atol=0.01)
    assert torch.equal(
        merged["model.layers.0.self_attn.k_proj.weight"], base["model.layers.0.self_attn.k_proj.weight"]
    )
    assert (dest / "tokenizer.json").exists() and not any("lora" in k for k in merged)


# -- hidden eval through an OpenAI-compatible server -------------------------------------------


def test_evaluate_with_vllm_plays_tools_and_scores(plugins: Any) -> None:
    fam = plugins.task_family("calc_chain")
    ex1 = fam.hidden_eval("fast")[0]
    with ScriptedServer() as server:
        server.script(
            turn("", ("add", json.dumps({"a": 2, "b": 3}))),  # a call the server parsed
            turn(f"<answer>{ex1.answer}</answer>"),
            turn('I will add: {"name": "add", "arguments": {"a": 1, "b": 1}}'),  # bare JSON: dialect fallback
            turn("<answer>-999999</answer>"),
        )
        done: list[int] = []
        report = prl.evaluate_with_vllm(
            fam,
            "fast",
            "unused",
            base_url=server.url,
            served_model="m",
            limit=2,
            concurrency=1,
            on_progress=done.append,
        )
        bodies = [body for body, _ in server.requests]
    assert report.n == 2 and report.score == 0.5 and report.scores == (1.0, 0.0)
    assert report.tool_calls_per_rollout == 1.0 and sum(done) == 2
    spec = fam.task_spec("fast")
    assert all(b["model"] == "m" and b["temperature"] == 0.0 and b["tool_choice"] == "auto" for b in bodies)
    assert bodies[0]["tools"] == [{"type": "function", "function": t.model_dump()} for t in spec.eval.tools]
    assert bodies[0]["messages"][0] == {"role": "system", "content": spec.eval.system_prompt}
    tool_msg = bodies[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"] == "5"
    assert tool_msg["tool_call_id"] == bodies[1]["messages"][-2]["tool_calls"][0]["id"]
    bare = bodies[3]["messages"]
    assert bare[-2]["content"] == "I will add:" and bare[-2]["tool_calls"][0]["function"]["name"] == "add"
    assert bare[-1]["content"] == "2"


# -- the runner with backend="prime-rl" (fake uv, fake vLLM) -----------------------------------

FAKE_VLLM = """\
#!{python}
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

opts = dict(a[2:].split("=", 1) for a in sys.argv[3:] if a.startswith("--") and "=" in a)
record = {{"argv": sys.argv[1:], "env": dict(os.environ)}}
(Path(__file__).parent / ("vllm-" + str(os.getpid()) + ".json")).write_text(json.dumps(record))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({{"object": "list", "data": [{{"id": opts["served-model-name"], "object": "model"}}]}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        message = {{"role": "assistant", "content": "<answer>0</answer>"}}
        choice = {{"index": 0, "message": message, "finish_reason": "stop"}}
        usage = {{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        self._send({{"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [choice], "usage": usage}})


ThreadingHTTPServer((opts["host"], int(opts["port"])), Handler).serve_forever()
"""


def test_runner_runs_a_job_on_the_prime_rl_backend(
    tmp_path: Path, plugins: Any, fake_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metatrain.jobs.runner import run_job

    vllm = fake_uv / "vllm"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable))
    vllm.chmod(vllm.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("METATRAIN_VLLM_BIN", str(vllm))
    bundle, _ = _bundle(
        tmp_path, plugins, "calc_chain", "fast", model="Qwen/Qwen3-0.6B", lora=None, max_steps=2
    )
    events: list[tuple[str, dict[str, Any]]] = []
    result = run_job(
        bundle,
        tmp_path / "result",
        device="cuda",
        progress=lambda e, d: events.append((e, d)),
        eval_env={"METATRAIN_EVAL_SECRET": "eval-secret-5678"},
        backend="prime-rl",
    )
    assert result.status == "succeeded", result.error
    assert result.train_steps == 2 and result.pre_score is not None and result.post_score is not None
    assert result.train_metrics["first_reward"] == 0.0 and result.train_metrics["last_reward"] == 0.25
    pre = json.loads((tmp_path / "result" / "pre_eval.json").read_text())
    assert pre["n"] == plugins.task_family("calc_chain").task_spec("fast").eval_n
    servers = [json.loads(p.read_text()) for p in fake_uv.glob("vllm-*.json")]
    assert sorted(s["argv"][1] for s in servers) == sorted(
        ["Qwen/Qwen3-0.6B", str(tmp_path / "result" / "train" / "model")]
    )
    for s in servers:
        assert "--tool-call-parser=hermes" in s["argv"] and "--load-format=safetensors" in s["argv"]
        assert "eval-secret" not in json.dumps(s["env"]) and "do-not-leak" not in json.dumps(s["env"])
    for c in _calls(fake_uv):
        assert "eval-secret" not in json.dumps(c["env"])
