"""Stateful tool environments (vf.StatefulToolEnv with hidden, injected arguments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import TaskSpec, parse_job_toml
from metatrain.training.environment import load_job_environment, rollout_environment_factory, visible_tools

STATEFUL_TOOLS = '''

class CountingEnv(vf.StatefulToolEnv):
    """calc_chain tools that also count their calls in a per-rollout world."""

    def __init__(self, **kwargs):
        super().__init__(tools=[], **kwargs)
        for fn in (add, subtract, multiply):
            self.add_tool(fn, args_to_skip=["world"])

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        world = state.setdefault("world", {"calls": 0, "seed": state["info"].get("seed", 0)})
        return {**tool_args, "world": world}


def add(world: dict, a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum a + b.
    """
    world["calls"] += 1
    return int(a) + int(b)


def subtract(world: dict, a: int, b: int) -> int:
    """Subtract one integer from another.

    Args:
        a: The integer to subtract from.
        b: The integer to subtract.

    Returns:
        The difference a - b.
    """
    world["calls"] += 1
    return int(a) - int(b)


def multiply(world: dict, a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product a * b.
    """
    world["calls"] += 1
    return int(a) * int(b)
'''


def make_stateful(ws: Path) -> None:
    """Swap the reference env's stateless tools for world-counting ones behind a StatefulToolEnv."""
    env = ws / "env.py"
    text = env.read_text()
    text = text[: text.index("def add(a: int, b: int)")] + text[text.index("def _content(") :]
    text = text.replace("return vf.ToolEnv(", "return CountingEnv(").replace(
        "tools=[add, subtract, multiply],", ""
    )
    env.write_text(text + STATEFUL_TOOLS)


@pytest.fixture
def stateful_workspace(reference_workspace: Path) -> Path:
    make_stateful(reference_workspace)
    return reference_workspace


def test_hidden_args_are_injected_per_rollout(stateful_workspace: Path) -> None:
    job = parse_job_toml((stateful_workspace / "job.toml").read_text())
    env = load_job_environment(stateful_workspace, job)
    assert [t.__name__ for t in visible_tools(env)] == ["add", "subtract", "multiply"]
    cls = rollout_environment_factory(env)
    one, two = cls(), cls()
    one.reset(info={"seed": 1}, answer="3")
    two.reset(info={"seed": 2}, answer="3")
    assert one.add(a=1, b=2) == "3" and one.multiply(a=2, b=5) == "10" and two.subtract(a=5, b=1) == "4"
    assert one.state["world"]["calls"] == 2 and two.state["world"]["calls"] == 1
    from transformers.utils import get_json_schema

    schema = get_json_schema(one.add)["function"]
    assert schema["name"] == "add" and list(schema["parameters"]["properties"]) == ["a", "b"]


def test_probe_accepts_a_stateful_env_matching_the_interface(
    stateful_workspace: Path, fast_spec: TaskSpec
) -> None:
    outcome = validate_submission(Workspace(stateful_workspace), fast_spec)
    assert outcome.report.ok, outcome.report.errors


def test_tool_results_reach_training_as_the_eval_shows_them() -> None:
    """Lists and dicts as JSON text and errors as the eval's error JSON, on both TRL paths: TRL
    passes a list result on as content blocks, which Qwen's chat template renders as an empty
    ``<tool_response>`` (triage's deploy and incident lists trained that way, unseen)."""
    import json

    import verifiers as vf
    from datasets import Dataset

    from metatrain.training.dialect import ParsedCall, call_tool
    from metatrain.training.environment import as_eval_tool

    def list_deploys(world: dict, service: str) -> list:
        """List a service's deploys.

        Args:
            service: The service name.

        Returns:
            One entry per deploy.
        """
        if service not in world:
            raise ValueError(f"no service {service!r}")
        return world[service]

    class Env(vf.StatefulToolEnv):
        def __init__(self) -> None:
            super().__init__(tools=[], dataset=Dataset.from_list([{"question": "q", "answer": "dep-1"}]))
            self.add_tool(list_deploys, args_to_skip=["world"])

        def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):  # type: ignore[no-untyped-def]
            return {**tool_args, "world": state["info"]["world"]}

    world = {"api": [{"id": "dep-1", "at": "10:05"}]}
    one = rollout_environment_factory(Env())()
    one.reset(info={"world": world}, answer="dep-1")
    bound = {"list_deploys": lambda **a: list_deploys(world, **a)}
    for args in ({"service": "api"}, {"service": "db"}, {"servce": "api"}):
        want, _ = call_tool(bound, ParsedCall("list_deploys", args))
        assert one.list_deploys(**args) == want
    assert json.loads(one.list_deploys(service="api")) == world["api"]
    assert json.loads(one.list_deploys(service="db")) == {"error": "ValueError: no service 'db'"}

    plain = as_eval_tool(lambda service: [service, {"b": 1, "a": 2}])
    assert plain(service="x") == '["x", {"a": 2, "b": 1}]'
    from transformers.utils import get_json_schema

    wrapped = as_eval_tool(visible_tools(Env())[0])
    assert get_json_schema(wrapped)["function"]["parameters"]["properties"].keys() == {"service"}
