"""Mapping between the episode's messages and the chat-completions wire format, and cost arithmetic."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from metatrain.protocols import ToolCall

_KEEP = {
    "system": ("role", "content"),
    "user": ("role", "content"),
    "assistant": ("role", "content", "tool_calls"),
    "tool": ("role", "tool_call_id", "content"),
}


def _wire_arguments(raw: str) -> str:
    """Arguments as sent back to the API: the raw text if it is a JSON object, else ``{}``.

    Some providers re-parse earlier tool-call arguments and reject the whole request when one is
    malformed; the trajectory keeps the raw text and the tool result already reported the error.
    """
    try:
        return raw if isinstance(json.loads(raw), dict) else "{}"
    except (json.JSONDecodeError, TypeError):
        return "{}"


def to_wire(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Episode messages -> API messages (only the keys the API defines; no mutation of the input)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        keep = _KEEP.get(str(m.get("role")), ("role", "content"))
        msg = {k: m[k] for k in keep if k in m}
        if msg.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": _wire_arguments(c["function"]["arguments"]),
                    },
                }
                for c in msg["tool_calls"]
            ]
            msg["content"] = msg.get("content") or None
        out.append(msg)
    return out


def from_wire_calls(tool_calls: Sequence[Any] | None, turn_id: str) -> tuple[ToolCall, ...]:
    """API tool calls -> ToolCalls, keeping the raw arguments text (malformed JSON included)."""
    calls: list[ToolCall] = []
    for i, tc in enumerate(tool_calls or ()):
        fn = getattr(tc, "function", None)
        if fn is None:  # a non-function tool call (custom tools): report its name, no arguments
            calls.append(
                ToolCall(getattr(tc, "id", None) or f"{turn_id}-{i}", str(getattr(tc, "type", "")), "")
            )
            continue
        args = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments)
        calls.append(ToolCall(tc.id or f"{turn_id}-{i}", fn.name or "", args or ""))
    return tuple(calls)


def prompt_chars(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """Characters of the request body's messages and tools (for the prompt-token estimate)."""
    return len(json.dumps(list(messages))) + len(json.dumps(list(tools)))
