"""triage: on-call incident triage; correlate services, incidents and deploys to name the culprit."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.common import GeneratedFamily, extract_answer
from metatrain_families.triage.generator import (
    CHANGES,
    SERVICES,
    START,
    SYMPTOMS,
    TEAMS,
    Difficulty,
    asks,
    generate_example,
    replies,
    rule,
)
from metatrain_families.triage.tools import TOOLS, tools_for

SYSTEM_PROMPT = (
    "You are the on-call engineer. Investigate with the provided tools, one call at a time: incidents, "
    "services and their dependencies, deploys. When you know the answer, reply with it inside "
    "<answer></answer> tags."
)
UNGUIDED_1_4 = {
    "fast": Difficulty(n_deps=1, n_other=2, earlier=(1, 2), rollback_p=0.0, questions=("deploy",)),
    "full": Difficulty(n_deps=1, n_other=2, earlier=(1, 2), rollback_p=0.0, questions=("deploy", "team")),
}
"""Version 1.4.0's knobs (untrained Qwen2.5-Coder-0.5B: 0.000 at n=200); the unguided levels start here."""
UNGUIDED = {
    "1 dependency, deploy/team": UNGUIDED_1_4["full"],
    "1 dependency, deploy": UNGUIDED_1_4["fast"],
    "no dependency, deploy/team": attrs.evolve(UNGUIDED_1_4["full"], n_deps=0),
    "no dependency, deploy": attrs.evolve(UNGUIDED_1_4["fast"], n_deps=0),
}
_SHIPPED_BY_OWNERS = {
    **UNGUIDED,
    **{f"guided, {label}": attrs.evolve(d, lookup="until", guided=True) for label, d in UNGUIDED.items()},
    **{
        f"guided, {label}, incidents without ids": attrs.evolve(
            d, lookup="until", guided=True, incident_ids=False
        )
        for label, d in UNGUIDED.items()
    },
    "guided, no dependency, deploy, incidents without ids, two tools": attrs.evolve(
        UNGUIDED["no dependency, deploy"], lookup="until", guided=True, incident_ids=False, lean_tools=True
    ),
}


def _with_other_shippers(label: str, d: Difficulty) -> tuple[str, Difficulty]:
    """A level asking team questions becomes its twin whose deploys other teams ship: with deploys
    shipped by owners, one get_service call answered 0.225-0.47 of the eval (1.5.0: 0.225)."""
    if "team" not in d.questions:
        return label, d
    return f"{label}, deploys shipped by other teams", attrs.evolve(d, shipper="others")


LEVELS = {"full": dict(_with_other_shippers(label, d) for label, d in _SHIPPED_BY_OWNERS.items())}
"""Candidates for ``metatrain calibrate``, hardest first: without a dependency the culprit is the
alerting service's own last deploy before the incident (two lookups). Guided levels spell the steps
out in the prompt and list deploys before a time, most recent first (``list_deploys(service,
until)``): on CPU, untrained Qwen2.5-Coder called ``list_deploys`` with the open incident's start
as ``since`` on the unguided level, listing the deploys after the culprit; guided, it made the right
``until`` call on 3 of 4 draws, but answered an incident id (docs/families.md, calibration). The
easiest levels also list incidents without ids, so that no incident id can be passed to
``get_deploy`` or answered; the very easiest offers only the two tools its question needs
(``Difficulty.lean_tools``). Levels asking team questions have deploys shipped by teams owning no
service (``Difficulty.shipper``), so no owner ``get_service`` shows is the answer (the kit's one-lookup
floor)."""
TEAMS_LEVEL = "guided, 1 dependency, deploy/team, incidents without ids, deploys shipped by other teams"
"""1.6.0's ``full``; ``fast`` is its deploy-question twin."""
SHIPPED = "guided, no dependency, deploy, incidents without ids, two tools"
"""``full`` since 1.7.0."""
DIFFICULTY = {
    "fast": attrs.evolve(LEVELS["full"][TEAMS_LEVEL], questions=("deploy",)),
    "full": LEVELS["full"][SHIPPED],
}
"""Since 1.7.0 ``full`` is the easiest level: no dependency, deploy questions, the steps spelled out,
incidents without ids, and only ``list_incidents`` and ``list_deploys``. Untrained
Qwen2.5-Coder-0.5B on one H100 (bfloat16): 0.150 [0.107, 0.206] on the level's calibration draw,
0.135 on 1.7.0's hidden eval (n=200); 1.6.0's ``full`` (``TEAMS_LEVEL``, one dependency, deploy or
team) scored 0.000. ``fast`` keeps 1.6.0's knobs, deploy questions only (docs/families.md)."""


def normalise_label(text: str | None) -> str | None:
    """A deploy-id or team answer; ignores case, outer spaces and quotes, a final '.', a 'team' word."""
    if text is None:
        return None
    cleaned = text.strip().strip("'\"`.").strip().lower()
    return re.sub(r"^team\s+|\s+team$", "", cleaned) or None


def _max_turns(d: Difficulty) -> int:
    return d.needed_calls + 2


def _describe(d: Difficulty) -> str:
    team = "owner of the culprit's service" if d.shipper == "owner" else "the team that shipped the culprit"
    asked = {"deploy": "the culprit deploy's id", "team": f"the team to page ({team})"}
    notes = " Some deploys were rolled back." if d.rollback_p > 0 else ""
    if d.lookup == "until":
        notes += " list_deploys(service, until) lists deploys at or before a time, most recent first."
    if d.guided:
        notes += " The prompt spells out the steps (incidents, dependencies, deploys, the pick)."
    if not d.incident_ids:
        notes += " list_incidents shows no incident ids (started, status, summary)."
    tools = "list_incidents, list_deploys"
    if not d.lean_tools:
        tools = "list_incidents, get_service, list_deploys, get_deploy"
    return (
        f"Teach a small model on-call incident triage through read-only tools ({tools}). "
        "Each example's world (info['world']) has "
        f"{1 + d.n_deps + d.n_other} services (the alerting one depends directly on {d.n_deps}), a few "
        "incidents (one open on the alerting service, older resolved ones, others elsewhere) and a day of "
        f"deploys, with decoys after the incident, on unrelated services and on indirect dependencies."
        f"{notes} The prompt names the alerting service and states the rule: {rule(d)} "
        f"The model answers {' or '.join(asked[k] for k in d.questions)}, scored by exact match after "
        "normalisation (case, surrounding spaces/quotes, a 'team' word). Service names come from "
        f"{list(SERVICES)}, teams from {list(TEAMS)}, deploy ids look like dep-1a2b, times are HH:MM; "
        f"symptoms {list(SYMPTOMS)}, changes {list(CHANGES)}."
    )


@attrs.frozen
class Triage(GeneratedFamily[Difficulty]):
    """The triage task family (held out: the generalisation probe)."""

    name: str = "triage"
    version: str = "1.7.0"
    held_out: bool = True

    difficulty = DIFFICULTY
    levels = LEVELS
    generate = staticmethod(generate_example)
    tools = TOOLS
    system_prompt = SYSTEM_PROMPT
    answer_format = (
        "<answer>DEPLOY_ID</answer> (e.g. dep-1a2b) or <answer>TEAM</answer>, as the question "
        "asks; case-insensitive"
    )
    max_tokens = 96
    templates = __name__

    def describe(self, d: Difficulty) -> str:
        return _describe(d)

    def tools_at(self, d: Difficulty) -> Sequence[Callable[..., Any]]:
        return tools_for(d.lookup, d.incident_ids, d.shipper, d.lean_tools)

    def example_tools(self, example: Example) -> Sequence[Callable[..., Any]]:
        world = example.info["world"]
        return tools_for(
            world.get("lookup", "since"),
            world.get("incident_ids", True),
            world.get("shipper", "owner"),
            world.get("tools") == "lean",
        )

    def max_turns(self, d: Difficulty) -> int:
        return _max_turns(d)

    def turn_cap(self, d: Difficulty) -> int:
        return _max_turns(d) + 4

    def env_values(self, d: Difficulty) -> dict[str, object]:
        return {
            "services": repr(SERVICES),
            "teams": repr(TEAMS),
            "symptoms": repr(SYMPTOMS),
            "changes": repr(CHANGES),
            "ask": repr(asks(d.shipper)),
            "reply": repr(replies(d.incident_ids, d.shipper)),
            "start": repr(START),
            "rule": repr(rule(d)),
            "n_deps": d.n_deps,
            "n_other": d.n_other,
            "earlier": repr(d.earlier),
            "rollback_p": d.rollback_p,
            "kinds": repr(d.questions),
            "lookup": repr(d.lookup),
            "guided": d.guided,
            "incident_ids": d.incident_ids,
            "shipper": repr(d.shipper),
            "lean_tools": d.lean_tools,
        }

    def score(self, example: Example, final_text: str) -> float:
        got = normalise_label(extract_answer(final_text))
        return 1.0 if got is not None and got == normalise_label(example.answer) else 0.0
