"""The six agent tools and their dispatcher. Every refusal is a specific message the agent sees."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from metatrain.episode.workspace import Workspace, WorkspaceError

MAX_ARGUMENT_BYTES = 300_000


def _fn(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    props = properties or {}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "Path relative to the workspace root"}
AGENT_TOOL_SCHEMAS: list[dict[str, Any]] = [
    _fn("read_file", "Read a UTF-8 text file from the workspace.", {"path": _PATH}),
    _fn(
        "write_file",
        "Create or overwrite a workspace file.",
        {"path": _PATH, "content": {"type": "string", "description": "Full file content"}},
    ),
    _fn(
        "edit_file",
        "Replace exactly one occurrence of old_text with new_text in a workspace file.",
        {"path": _PATH, "old_text": {"type": "string"}, "new_text": {"type": "string"}},
    ),
    _fn("list_files", "List workspace files with their sizes."),
    _fn(
        "get_baseline_scores",
        "Frozen hidden-eval scores of each untrained allowed model (best_pre is the best of them).",
    ),
    _fn(
        "submit_job",
        "Validate job.toml and its environment module; if valid, the job is queued for training and the "
        "episode ends. Failures are returned so you can fix them; attempts are capped.",
    ),
]
AGENT_TOOL_NAMES = [s["function"]["name"] for s in AGENT_TOOL_SCHEMAS]


@attrs.frozen
class ToolOutcome:
    """What a tool call returned to the agent."""

    content: str
    ok: bool
    submitted: bool = False


@attrs.define
class AgentTools:
    """Binds the tools to one episode's workspace, baselines and submit handler."""

    workspace: Workspace
    baselines: dict[str, Any]
    submit: Callable[[], ToolOutcome]

    def dispatch(self, name: str, arguments: str) -> ToolOutcome:
        if name not in AGENT_TOOL_NAMES:
            return ToolOutcome(
                f"error: unknown tool {name!r}; available tools: {', '.join(AGENT_TOOL_NAMES)}", False
            )
        if len(arguments.encode("utf-8", "replace")) > MAX_ARGUMENT_BYTES:
            return ToolOutcome(f"error: arguments for {name} exceed {MAX_ARGUMENT_BYTES} bytes", False)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolOutcome(
                f"error: arguments for {name} are not valid JSON ({exc.msg} at char {exc.pos})", False
            )
        if not isinstance(args, dict):
            return ToolOutcome(f"error: arguments for {name} must be a JSON object", False)
        schema = next(s for s in AGENT_TOOL_SCHEMAS if s["function"]["name"] == name)["function"][
            "parameters"
        ]
        expected = set(schema["properties"])
        missing = sorted(expected - set(args))
        extra = sorted(set(args) - expected)
        if missing or extra:
            parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else [])
            return ToolOutcome(f"error: {name} arguments: {'; '.join(parts)}", False)
        bad = [k for k, v in args.items() if not isinstance(v, str)]
        if bad:
            return ToolOutcome(f"error: {name} arguments {bad} must be strings", False)
        try:
            return getattr(self, f"_{name}")(**args)
        except WorkspaceError as exc:
            return ToolOutcome(f"error: {exc}", False)

    def _read_file(self, path: str) -> ToolOutcome:
        return ToolOutcome(self.workspace.read(path), True)

    def _write_file(self, path: str, content: str) -> ToolOutcome:
        n = self.workspace.write(path, content)
        return ToolOutcome(f"wrote {n} bytes to {path}", True)

    def _edit_file(self, path: str, old_text: str, new_text: str) -> ToolOutcome:
        n = self.workspace.edit(path, old_text, new_text)
        return ToolOutcome(f"edited {path} ({n} bytes now)", True)

    def _list_files(self) -> ToolOutcome:
        rows = self.workspace.listing()
        return ToolOutcome("\n".join(f"{p}\t{size}" for p, size in rows) or "(empty)", True)

    def _get_baseline_scores(self) -> ToolOutcome:
        return ToolOutcome(json.dumps(self.baselines, indent=2), True)

    def _submit_job(self) -> ToolOutcome:
        return self.submit()
