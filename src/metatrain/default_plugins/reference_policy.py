"""The ``reference`` policy: a scripted baseline agent.

It acts only through the agent tools, like an LLM would: it looks at the workspace and the
baselines, writes the family's reference ``env.py`` and ``job.toml``, and calls ``submit_job``.
It does not repair a rejected submission; it is a baseline, not a solver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from metatrain.protocols import PolicyContext, PolicyTurn, ToolCall


@attrs.define
class ReferencePolicy:
    name: str
    files: dict[str, str]
    step: int = 0

    def _plan(self) -> list[tuple[str, dict[str, Any]]]:
        plan: list[tuple[str, dict[str, Any]]] = [
            ("list_files", {}),
            ("read_file", {"path": "TASK.md"}),
            ("get_baseline_scores", {}),
        ]
        plan += [("write_file", {"path": p, "content": c}) for p, c in self.files.items()]
        plan.append(("submit_job", {}))
        return plan

    def next_turn(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyTurn:
        plan = self._plan()
        if self.step >= len(plan):
            last = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
            verdict = "submitted" if last and str(last.get("content", "")).startswith("VALID") else "gave up"
            return PolicyTurn(content=f"Reference policy finished: {verdict}.", model=self.name)
        name, args = plan[self.step]
        self.step += 1
        call = ToolCall(id=f"ref-{self.step}", name=name, arguments=json.dumps(args))
        return PolicyTurn(content=f"Step {self.step}: {name}", tool_calls=(call,), model=self.name)


@attrs.frozen
class ReferencePolicyFactory:
    name: str = "reference"
    description: str = "Scripted baseline: writes the family's reference job through the agent tools."

    def create(self, arg: str | None, context: PolicyContext) -> ReferencePolicy:
        if arg:
            raise ValueError("the reference policy takes no argument (use --agent reference)")
        return ReferencePolicy(name="reference", files=context.family.reference_job(context.budget))
