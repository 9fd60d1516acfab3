"""Fast checks of the ``transformers`` policy factory and its message rendering (no model loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metatrain.default_plugins.transformers_policy import _template_messages
from metatrain.episode.loop import EpisodePolicyContext
from metatrain.plugins import load_plugins


def test_factory_rejects_missing_or_unknown_models(tmp_path: Path) -> None:
    pm = load_plugins()
    family = pm.task_family("calc_chain")
    context = EpisodePolicyContext(family, family.task_spec("fast"), "fast")
    factory = pm.policy("transformers")
    with pytest.raises(ValueError, match="needs a model"):
        factory.create(None, context)
    with pytest.raises(ValueError, match="nor a local model directory"):
        factory.create(str(tmp_path / "nothing-here"), context)


def test_tool_call_arguments_become_objects_for_the_template_when_they_parse() -> None:
    calls = [
        {
            "id": "a",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": "x"})},
        },
        {"id": "b", "type": "function", "function": {"name": "write_file", "arguments": "{broken"}},
    ]
    messages = [{"role": "assistant", "content": "", "tool_calls": calls}]
    rendered = _template_messages(messages)
    args = [c["function"]["arguments"] for c in rendered[0]["tool_calls"]]
    assert args == [{"path": "x"}, "{broken"]
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == '{"path": "x"}'  # input untouched
