"""Boundary models, JSON Schema export, the training table's bounds, and the tool-call dialect."""

from __future__ import annotations

import json
import tomllib

import pytest
from pydantic import ValidationError

from metatrain.plugins import load_plugins
from metatrain.specs import SCHEMA_MODELS, JobFile, TaskSpec, json_schemas, parse_job_toml
from metatrain.training.dialect import call_tool, install_parser, parse_assistant
from metatrain.training.table import bound_errors, trl_config_kwargs


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    return load_plugins().task_family("calc_chain").task_spec("fast")


@pytest.fixture(scope="module")
def job_text() -> str:
    return load_plugins().task_family("calc_chain").reference_job("fast")["job.toml"]


def test_every_boundary_model_exports_a_schema_and_round_trips(spec: TaskSpec) -> None:
    schemas = json_schemas()
    assert set(schemas) == set(SCHEMA_MODELS)
    for schema in schemas.values():
        assert schema["type"] == "object" and schema["properties"]
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def test_reference_job_parses_within_bounds(spec: TaskSpec, job_text: str) -> None:
    job = parse_job_toml(job_text)
    assert bound_errors(job.train, spec.bounds, dataset_size=64, max_turns=4) == []


def test_malformed_job_files(job_text: str) -> None:
    with pytest.raises(tomllib.TOMLDecodeError):
        parse_job_toml("family = ")
    with pytest.raises(ValidationError, match="learning_rate"):
        parse_job_toml(job_text.replace("lr = 5e-5", "learning_rate = 5e-5"))
    with pytest.raises(ValidationError, match="rollouts_per_example"):
        parse_job_toml(job_text.replace("rollouts_per_example = 4", "rollouts_per_example = 1"))
    with pytest.raises(ValidationError, match="optimizer"):
        parse_job_toml(job_text.replace('optimizer = "adamw"', 'optimizer = "lion"'))


def test_out_of_bounds_job_files(spec: TaskSpec, job_text: str) -> None:
    job = parse_job_toml(
        job_text.replace("max_steps = 2", "max_steps = 500").replace("smollm2-135m", "gpt-5")
    )
    errors = bound_errors(job.train, spec.bounds, dataset_size=1, max_turns=40)
    joined = "\n".join(errors)
    assert "train.max_steps = 500 is outside the allowed range [1, 8]" in joined
    assert "train.model = 'gpt-5' is not allowed" in joined
    assert "the dataset has 1 examples" in joined
    assert "max_turns = 40" in joined
    no_lora = JobFile.model_validate(
        {
            **parse_job_toml(job_text).model_dump(),
            "train": {**parse_job_toml(job_text).train.model_dump(), "lora": None},
        }
    )
    assert any("full fine-tuning is not allowed" in e for e in bound_errors(no_lora.train, spec.bounds))


def test_trl_mapping(job_text: str) -> None:
    kw = trl_config_kwargs(parse_job_toml(job_text).train, output_dir="o", device="cpu", max_turns=4)
    assert kw["num_generations"] == 4 and kw["per_device_train_batch_size"] == 4
    assert kw["gradient_accumulation_steps"] == 2  # 2 prompts x 4 rollouts per optimizer step
    assert kw["max_tool_calling_iterations"] == 3 and kw["use_cpu"] and not kw["bf16"]
    assert kw["optim"] == "adamw_torch" and kw["loss_type"] == "grpo"


@pytest.mark.parametrize(
    ("text", "calls", "content"),
    [
        (
            '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
            [("add", {"a": 1, "b": 2})],
            "",
        ),
        (
            'First.\n```json\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n```',
            [("multiply", {"a": 3, "b": 4})],
            "First.",
        ),
        (
            '{"name": "add", "arguments": {"a": 1, "b": 1}} then <answer>2</answer>',
            [("add", {"a": 1, "b": 1})],
            "then <answer>2</answer>",
        ),
        ("<answer>7</answer>", [], "<answer>7</answer>"),
        ('{"a": 1}', [], '{"a": 1}'),
    ],
)
def test_dialect_parsing(text: str, calls: list[tuple[str, dict[str, int]]], content: str) -> None:
    parsed = parse_assistant(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == calls
    assert parsed.content == content


def test_malformed_tagged_call_is_counted_and_kept_as_text() -> None:
    parsed = parse_assistant('<tool_call>{"name": "add", "arguments": </tool_call>')
    assert parsed.calls == () and parsed.malformed == 1 and "tool_call" in parsed.content


def test_tool_errors_are_shown_to_the_model() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    tools = {"add": add}
    assert call_tool(tools, parse_assistant('{"name": "add", "arguments": {"a": 2, "b": 3}}').calls[0]) == (
        "5",
        True,
    )
    text, ok = call_tool(tools, parse_assistant('{"name": "sub", "arguments": {}}').calls[0])
    assert not ok and "unknown tool" in json.loads(text)["error"]
    text, ok = call_tool(tools, parse_assistant('{"name": "add", "arguments": {"a": 1}}').calls[0])
    assert not ok and "TypeError" in text


def test_install_parser_gives_trl_the_same_parse() -> None:
    class Tok:
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            return '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'

    tok = install_parser(Tok())
    msg = tok.parse_response([1, 2, 3])
    assert msg["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert tok.response_schema
