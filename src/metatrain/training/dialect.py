"""The one tool-call dialect used by training rollouts and the hidden eval.

Rendering (chat templates in ``metatrain.models.templates``): an assistant tool call is
``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>``; a tool result is shown to the
model as ``<tool_response>\\nRESULT\\n</tool_response>``.

Parsing is lenient in one documented way: small models often write the same JSON object bare
or inside a fenced code block instead of the tags. A JSON object with exactly the keys ``name``
(a string) and ``arguments`` (an object) is read as a call wherever it appears. Anything else
(unbalanced JSON, a non-object ``arguments``) is left in the text and counted as ``malformed``
when it sat inside ``<tool_call>`` tags. The final answer text is what remains once calls are
removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from types import MethodType
from typing import Any

import attrs

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
FENCE_RE = re.compile(r"```(?:json|tool_call)?\s*\n?(.*?)```", re.DOTALL)
DIALECT_NAME = "metatrain-toolcall-v1"


@attrs.frozen
class ParsedCall:
    name: str
    arguments: dict[str, Any]


@attrs.frozen
class ParsedResponse:
    """An assistant message split into free text and tool calls."""

    content: str
    calls: tuple[ParsedCall, ...] = ()
    malformed: int = 0

    def as_message(self) -> dict[str, Any]:
        """OpenAI-style assistant message (``arguments`` as a dict, as TRL expects)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            msg["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.calls
            ]
        return msg


def _as_call(obj: Any) -> ParsedCall | None:
    if (
        isinstance(obj, dict)
        and set(obj) == {"name", "arguments"}
        and isinstance(obj["name"], str)
        and isinstance(obj["arguments"], dict)
    ):
        return ParsedCall(obj["name"], obj["arguments"])
    return None


def _json_objects(text: str) -> list[tuple[int, int, Any]]:
    """Every top-level JSON object in ``text`` as (start, end, value)."""
    decoder = json.JSONDecoder()
    found: list[tuple[int, int, Any]] = []
    i = 0
    while (i := text.find("{", i)) != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        found.append((i, end, value))
        i = end
    return found


def parse_assistant(text: str) -> ParsedResponse:
    """Split one assistant generation into content and tool calls (see module docstring)."""
    calls: list[ParsedCall] = []
    malformed = 0
    spans: list[tuple[int, int]] = []
    for m in TOOL_CALL_RE.finditer(text):
        objs = _json_objects(m.group(1))
        parsed = [c for _, _, v in objs if (c := _as_call(v)) is not None]
        if parsed:
            calls.extend(parsed)
            spans.append(m.span())
        else:
            malformed += 1
    rest = _remove_spans(text, spans)
    if not calls:
        fenced_spans = []
        for m in FENCE_RE.finditer(rest):
            found = [c for _, _, v in _json_objects(m.group(1)) if (c := _as_call(v)) is not None]
            if found:
                calls.extend(found)
                fenced_spans.append(m.span())
        rest = _remove_spans(rest, fenced_spans)
    if not calls:
        bare = [(s, e, c) for s, e, v in _json_objects(rest) if (c := _as_call(v)) is not None]
        calls.extend(c for _, _, c in bare)
        rest = _remove_spans(rest, [(s, e) for s, e, _ in bare])
    return ParsedResponse(rest.strip(), tuple(calls), malformed)


def _remove_spans(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + text[end:]
    return text


def render_tool_result(value: Any) -> str:
    """Text of a tool result as the model sees it (JSON for non-strings)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def run_tool(fn: Callable[..., Any], arguments: dict[str, Any]) -> tuple[str, bool]:
    """Call ``fn(**arguments)``; returns (result text, ok). Errors become text the model sees. The
    hidden eval and training both show tool results through this."""
    try:
        return render_tool_result(fn(**arguments)), True
    except Exception as exc:  # the model sees the error, as in verifiers' ToolEnv
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"}), False


def call_tool(tools: dict[str, Callable[..., Any]], call: ParsedCall) -> tuple[str, bool]:
    """Run one parsed call; returns (result text, ok). Errors become text the model sees."""
    fn = tools.get(call.name)
    if fn is None:
        return json.dumps({"error": f"unknown tool {call.name!r}; tools are {sorted(tools)}"}), False
    return run_tool(fn, call.arguments)


def install_parser(tokenizer: Any) -> Any:
    """Make TRL parse generations with this dialect (TRL calls ``tokenizer.parse_response(ids)``)."""

    def parse_response(self: Any, ids: Any, **_: Any) -> dict[str, Any]:
        text = ids if isinstance(ids, str) else self.decode(ids, skip_special_tokens=True)
        return parse_assistant(text).as_message()

    tokenizer.response_schema = {"dialect": DIALECT_NAME}
    tokenizer.parse_response = MethodType(parse_response, tokenizer)
    return tokenizer
