"""The validation probe runs agent code for real in its sandbox, and refuses escapes."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import TaskSpec


def probe(ws: Path, spec: TaskSpec, wall: float = 120.0) -> list[str]:
    outcome = validate_submission(Workspace(ws), spec, wall_seconds=wall)
    return outcome.report.errors


def patch_env(ws: Path, prefix: str = "", rubric_extra: str = "") -> None:
    env = ws / "env.py"
    text = env.read_text()
    if prefix:
        text = text.replace("import verifiers as vf", "import verifiers as vf\n" + prefix, 1)
    if rubric_extra:
        text = text.replace(
            "def correct_answer(completion, answer, **kwargs) -> float:\n",
            "def correct_answer(completion, answer, **kwargs) -> float:\n" + rubric_extra,
            1,
        )
    env.write_text(text)


def test_reference_job_validates_with_full_isolation(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    outcome = validate_submission(Workspace(reference_workspace), fast_spec)
    assert outcome.report.ok, outcome.report.errors
    iso = outcome.report.checks["isolation"]
    assert iso["landlock_abi"] and iso["netns"]
    assert outcome.report.checks["dataset_size"] == 64


def test_hidden_eval_generator_is_unreachable(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    patch_env(reference_workspace, "import metatrain_families.secret\n")
    errors = probe(reference_workspace, fast_spec)
    assert errors and "metatrain_families" in errors[0]


def test_reading_outside_the_workspace_is_refused(
    reference_workspace: Path, fast_spec: TaskSpec, tmp_path: Path
) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("hidden eval answers")
    patch_env(reference_workspace, f"open({str(secret)!r}).read()\n")
    errors = probe(reference_workspace, fast_spec)
    assert errors and "PermissionError" in errors[0]


def test_network_is_refused(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(20)
    t = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    t.start()
    try:
        patch_env(
            reference_workspace,
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n",
        )
        errors = probe(reference_workspace, fast_spec)
    finally:
        server.close()
        t.join(timeout=25)
    assert errors and ("Error" in errors[0])
    assert accepted == [None]


def _accept(server: socket.socket) -> object:
    try:
        conn, _ = server.accept()
        conn.close()
        return "connected"
    except OSError:
        return None


def test_secrets_do_not_reach_agent_code(
    reference_workspace: Path, fast_spec: TaskSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-shouldneverleak")
    monkeypatch.setenv("HARMLESS_LOOKING", "sk-or-v1-shouldneverleak")
    patch_env(reference_workspace, "import os\nraise RuntimeError(repr(sorted(os.environ.items())))\n")
    errors = probe(reference_workspace, fast_spec)
    assert errors and "RuntimeError" in errors[0]
    assert "shouldneverleak" not in errors[0] and "OPENROUTER" not in errors[0]


def test_runaway_loop_is_killed(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    patch_env(reference_workspace, "while True:\n    pass\n")
    errors = probe(reference_workspace, fast_spec, wall=15)
    assert errors and "timed out" in errors[0]


def test_raising_rubric_is_a_failure_not_a_zero(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    patch_env(reference_workspace, rubric_extra="    raise KeyError('oops')\n")
    errors = probe(reference_workspace, fast_spec)
    assert errors and all("rubric function correct_answer raised KeyError" in e for e in errors)


def test_tool_interface_must_match(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    env = reference_workspace / "env.py"
    env.write_text(
        env.read_text()
        .replace("tools=[add, subtract, multiply]", "tools=[add, subtract]")
        .replace("def multiply(a: int, b: int)", "def multiply(a: int, b: str)")
    )
    errors = probe(reference_workspace, fast_spec)
    assert any("lacks eval tool 'multiply'" in e for e in errors)


def test_v1_api_and_wrong_return_types_are_refused(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    env = reference_workspace / "env.py"
    env.write_text(env.read_text() + "\n\ndef load_environment(**kwargs):\n    return {'not': 'an env'}\n")
    errors = probe(reference_workspace, fast_spec)
    assert errors and "must return a verifiers.ToolEnv" in errors[0]


def test_empty_dataset_is_refused(reference_workspace: Path, fast_spec: TaskSpec) -> None:
    job = reference_workspace / "job.toml"
    job.write_text(job.read_text().replace("num_examples = 64", "num_examples = 0"))
    errors = probe(reference_workspace, fast_spec)
    assert errors and "empty" in " ".join(errors)


def test_unparseable_job_is_reported_without_running_code(
    reference_workspace: Path, fast_spec: TaskSpec
) -> None:
    (reference_workspace / "job.toml").write_text("family = [")
    outcome = validate_submission(Workspace(reference_workspace), fast_spec)
    assert not outcome.parseable and "not valid TOML" in outcome.report.errors[0]
