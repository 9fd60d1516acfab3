"""The ``reference`` policy: a scripted baseline agent.

It acts only through the agent tools, like an LLM would: it looks at the workspace and the
baselines, writes the family's reference ``env.py`` and ``job.toml``, and calls ``submit_job``.
It does not repair a rejected submission; it is a baseline, not a solver.

``--agent reference:KEY=VALUE,...`` changes keys of the reference ``job.toml`` first (an ablation
of the reference job without editing the family), e.g. ``reference:train.advantage_scale=batch``.
KEY is a dotted path under ``train`` or ``env_args``; VALUE is a TOML value, or else a string.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from typing import Any

import attrs
import tomli_w
from pydantic import ValidationError

from metatrain.protocols import PolicyContext, PolicyTurn, ToolCall
from metatrain.specs import TaskSpec, parse_job_toml
from metatrain.training.table import bound_errors

OVERRIDABLE = ("train", "env_args")


def parse_overrides(arg: str) -> dict[str, Any]:
    """``KEY=VALUE,...`` as ``{dotted key: value}``; raises ValueError naming the malformed part."""
    out: dict[str, Any] = {}
    for part in (p.strip() for p in arg.split(",")):
        key, eq, raw = (x.strip() for x in part.partition("="))
        if not eq or not key or not raw:
            raise ValueError(f"reference override {part!r} is not KEY=VALUE (e.g. train.lr=5e-5)")
        if key.split(".")[0] not in OVERRIDABLE or "." not in key:
            raise ValueError(f"reference override {key!r}: only keys under {list(OVERRIDABLE)} can change")
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key] = value
    return out


def apply_overrides(job_toml: str, overrides: dict[str, Any], spec: TaskSpec) -> str:
    """The job file with ``overrides`` set, checked against the job schema and ``spec``'s bounds."""
    doc = tomllib.loads(job_toml)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = doc
        for name in parents:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise ValueError(f"reference override {key!r}: {name!r} is not a table")
            node = child
        node[leaf] = value
    changed = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
    text = f"# Reference job for {doc.get('family')}, changed by --agent reference:{changed}\n"
    text += tomli_w.dumps(doc)
    try:
        job = parse_job_toml(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"reference overrides {changed} make an invalid job.toml: {problems}") from exc
    errors = bound_errors(job.train, spec.bounds)
    if errors:
        raise ValueError(f"reference overrides {changed} break the task's bounds: " + "; ".join(errors))
    return text


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
    description: str = (
        "Scripted baseline: writes the family's reference job through the agent tools "
        "(reference:KEY=VALUE,... changes job.toml keys first)"
    )

    def create(self, arg: str | None, context: PolicyContext) -> ReferencePolicy:
        files = dict(context.family.reference_job(context.budget))
        if arg:
            files["job.toml"] = apply_overrides(files["job.toml"], parse_overrides(arg), context.spec)
        return ReferencePolicy(name="reference", files=files)
