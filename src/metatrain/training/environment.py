"""Loading an agent's classic-API verifiers environment and calling its rubric strictly.

Shared by the validation probe and the TRL backend, so both see the job exactly the same way.
Runs inside the sandbox: it imports agent-written code.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metatrain.specs import JobFile
from metatrain.training.dialect import run_tool

RewardFn = Callable[..., Any]


class EnvironmentError_(Exception):
    """The agent's environment module is unusable; the message is shown to the agent."""


def load_job_environment(workspace: Path, job: JobFile) -> Any:
    """Import the job's environment module and call ``load_environment(**env_args)``."""
    path = (workspace / job.environment).resolve()
    if not path.is_file():
        raise EnvironmentError_(f"environment module {job.environment!r} does not exist in the workspace")
    spec = importlib.util.spec_from_file_location("metatrain_job_env", path)
    if spec is None or spec.loader is None:
        raise EnvironmentError_(f"cannot import {job.environment!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["metatrain_job_env"] = module
    spec.loader.exec_module(module)
    load = getattr(module, "load_environment", None)
    if not callable(load):
        raise EnvironmentError_(f"{job.environment} defines no callable load_environment()")
    env = load(**job.env_args)
    check_classic_tool_env(env)
    return env


def check_classic_tool_env(env: Any) -> None:
    """Refuse anything but a classic-API ``verifiers.ToolEnv`` (no ``verifiers.v1``)."""
    import verifiers as vf

    cls_module = type(env).__module__
    if cls_module.startswith("verifiers.v1") or any(m.startswith("verifiers.v1") for m in _agent_imports()):
        raise EnvironmentError_("job environments may use only the classic verifiers API, not verifiers.v1")
    if not isinstance(env, vf.ToolEnv):
        raise EnvironmentError_(
            f"load_environment() returned {type(env).__name__}; it must return a verifiers.ToolEnv"
        )


def _agent_imports() -> list[str]:
    return [name for name in sys.modules if name.startswith("verifiers.v1")]


def user_reward_funcs(env: Any) -> list[tuple[RewardFn, float]]:
    """The agent's rubric functions with their weights (tool-monitor metrics and zero weights dropped)."""
    rubrics = list(getattr(env.rubric, "rubrics", None) or [env.rubric])
    pairs: list[tuple[RewardFn, float]] = []
    for rubric in rubrics:
        if type(rubric).__name__ == "ToolMonitorRubric":
            continue
        for func, weight in zip(rubric.funcs, rubric.weights, strict=False):
            if weight != 0:
                pairs.append((func, float(weight)))
    return pairs


def to_vf_messages(messages: list[dict[str, Any]]) -> list[Any]:
    """Plain chat dicts -> verifiers message objects (what classic rubric functions receive)."""
    from verifiers.types import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

    out: list[Any] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        content = m.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content=content))
        elif role == "user":
            out.append(UserMessage(content=content))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=m.get("tool_call_id") or f"call_{i}"))
        else:
            calls = [
                ToolCall(
                    id=f"call_{i}_{j}",
                    name=c["function"]["name"],
                    arguments=_json_text(c["function"].get("arguments", {})),
                )
                for j, c in enumerate(m.get("tool_calls") or [])
            ]
            out.append(AssistantMessage(content=content, tool_calls=calls or None))
    return out


def _json_text(arguments: Any) -> str:
    import json

    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def call_reward(func: RewardFn, **objects: Any) -> float:
    """Call one rubric function with the arguments it names; exceptions propagate (never a silent 0)."""
    import asyncio

    sig = inspect.signature(func)
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        kwargs = objects
    else:
        kwargs = {k: v for k, v in objects.items() if k in sig.parameters}
    value = func(**kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"returned a non-finite value {result}")
    return result


async def _await(value: Any) -> Any:
    return await value


def visible_tools(env: Any) -> list[Callable[..., Any]]:
    """The environment's tools as the model sees them: injected (skipped) arguments removed."""
    from verifiers.envs.stateful_tool_env import filter_signature

    skipped = dict(getattr(env, "skipped_args", None) or {})
    return [filter_signature(t, skipped.get(_tool_name(t), [])) for t in env.tools]


def _tool_name(tool: Any) -> str:
    return str(getattr(tool, "__name__", type(tool).__name__))


def is_stateful(env: Any) -> bool:
    import verifiers as vf

    return isinstance(env, vf.StatefulToolEnv)


def rollout_environment_factory(env: Any) -> Callable[[], Any]:
    """A TRL ``environment_factory`` for a ``vf.StatefulToolEnv``: one object per rollout.

    ``reset(**row)`` starts a fresh state from the dataset row; each tool method calls the env's
    ``update_tool_args`` (which injects hidden arguments such as the example's world), then the
    tool, and returns its result as the eval shows it (``_result_text``). The rollout's state is
    ``instance.state``; reward functions receive it as ``state``.
    """
    methods: dict[str, Any] = {}
    for tool, shown in zip(env.tools, visible_tools(env), strict=True):
        methods[_tool_name(tool)] = _tool_method(env, tool, shown)

    def reset(self: Any, **row: Any) -> None:
        info = row.get("info") or {}
        self.state = {"info": info, "answer": row.get("answer", ""), "prompt": row.get("prompt")}
        return None

    cls = type("RolloutTools", (), {"reset": reset, **methods})
    return cls


def _result_text(tool: Callable[..., Any], args: dict[str, Any]) -> str:
    """The tool's result, or its error, as the text the hidden eval shows the model (``run_tool``).

    Why: TRL passes a tool's list result on as multimodal content blocks, which Qwen's chat template
    renders as an empty ``<tool_response>``, and other values as ``str()`` (Python reprs). Triage's
    list tools trained on empty responses for sessions, while the eval showed their JSON."""

    def resolved(**kwargs: Any) -> Any:
        value = tool(**kwargs)
        if inspect.isawaitable(value):
            import asyncio

            value = asyncio.run(_await(value))
        return value

    return run_tool(resolved, args)[0]


def as_eval_tool(tool: Callable[..., Any]) -> Callable[..., Any]:
    """``tool`` for TRL's ``tools=``: the same name, signature and docstring (TRL builds the schema
    from them), returning the text the eval shows (``_result_text``)."""

    @functools.wraps(tool)
    def wrapped(**kwargs: Any) -> str:
        return _result_text(tool, kwargs)

    return wrapped


def _tool_method(env: Any, tool: Callable[..., Any], shown: Callable[..., Any]) -> Callable[..., Any]:
    name = _tool_name(tool)

    def method(self: Any, **kwargs: Any) -> str:
        args = env.update_tool_args(name, dict(kwargs), [], self.state) or kwargs
        return _result_text(tool, args)

    sig = inspect.signature(shown)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__name__ = name
    method.__doc__ = tool.__doc__
    method.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()])  # type: ignore[attr-defined]
    method.__annotations__ = dict(getattr(shown, "__annotations__", {}))
    return method
