"""triage's example generator: a small service graph, incidents, a day of deploys, one culprit.

The reference environment (reference_env.py.tmpl) mirrors this code call for call, so its training
set follows exactly this distribution (a test checks that both produce the same prompts).
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from metatrain.specs import Example

SERVICES = (
    "checkout", "payments", "auth", "inventory", "search", "catalog", "cart", "shipping",
    "notifications", "billing", "gateway", "profile", "recommendations", "reviews", "pricing", "media",
)  # fmt: skip
TEAMS = (
    "atlas", "borealis", "cobalt", "delta", "ember", "fjord", "granite", "harbor",
    "ion", "juniper", "kestrel", "lumen", "meridian", "nimbus", "onyx", "prism",
    "quartz", "raven", "sable", "tundra", "umber", "vega", "willow", "xenon",
    "yarrow", "zephyr", "alder", "basalt", "cedar", "dune", "falcon", "glacier",
)  # fmt: skip
"""32 teams, so that a constant team guess, right 1 time in 32 on the team questions (half of
``full``), stays under the guess floor; with 16 it scored 0.065 on one hidden draw."""
SYMPTOMS = (
    "error rate above 5%", "p99 latency over 2s", "5xx spike on the public API",
    "queue backlog growing", "health checks failing",
)  # fmt: skip
CHANGES = (
    "bump dependency versions", "tune connection pool size", "enable new caching layer",
    "refactor request validation", "raise request timeout", "rotate TLS certificates",
    "migrate config to new format", "add retry on upstream calls",
)  # fmt: skip
ASK = {
    "deploy": "When you have found it, reply with the culprit deploy's id inside <answer></answer> tags.",
    "team": (
        "When you have found it, reply with the team to page, the team that owns the service the "
        "culprit deploy went to, inside <answer></answer> tags."
    ),
}
"""The answer format without a placeholder: with ``as <answer>DEPLOY_ID</answer>.`` last, Qwen2.5-Coder
copied the placeholder instead of calling a tool (docs/families.md, calibration). The prompt then
asks for the first call (``START``)."""
ASK_SHIPPED_BY_OTHERS = {
    **ASK,
    "team": (
        "When you have found it, reply with the team to page, the team that shipped the culprit deploy "
        "(get_deploy shows it), inside <answer></answer> tags."
    ),
}
"""``ASK`` where deploys are shipped by teams that own no service (``Difficulty.shipper``)."""
START = "Start now: call list_incidents for {service}."
REPLY = {
    "deploy": (
        "Reply with the culprit deploy's id (deploy ids start with dep-, incident ids with INC-) inside "
        "<answer></answer> tags."
    ),
    "team": "Reply with the team to page inside <answer></answer> tags.",
}
"""The last of the ``guided`` steps; the prompt still ends with ``START``: ending on the reply, untrained
Qwen2.5-Coder answered the example id in get_deploy's docstring without a call (16 of 16, CPU)."""
REPLY_WITHOUT_INCIDENT_IDS = {
    **REPLY,
    "deploy": "Reply with the culprit deploy's id (it starts with dep-) inside <answer></answer> tags.",
}
"""``REPLY`` where incidents have no ids: naming the ``INC-`` prefix, the reply step made untrained
Qwen2.5-Coder answer ``<answer>INC-</answer>`` without a call (3 of 3, CPU)."""


REPLY_TEAM_SHIPPED_BY_OTHERS = (
    "Reply with the team to page, the team that shipped the culprit deploy, inside <answer></answer> tags."
)


def replies(incident_ids: bool, shipper: str = "owner") -> dict[str, str]:
    """The guided reply step per question kind."""
    base = REPLY if incident_ids else REPLY_WITHOUT_INCIDENT_IDS
    return base if shipper == "owner" else {**base, "team": REPLY_TEAM_SHIPPED_BY_OTHERS}


def asks(shipper: str = "owner") -> dict[str, str]:
    """The unguided question per question kind."""
    return ASK if shipper == "owner" else ASK_SHIPPED_BY_OTHERS


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_deps: int
    n_other: int
    earlier: tuple[int, int]
    rollback_p: float
    questions: tuple[str, ...]
    lookup: str = attrs.field(default="since", validator=attrs.validators.in_(("since", "until")))
    """How the deploy log is queried: ``list_deploys(service, since)``, oldest first, or (easier: the
    rule's window) ``list_deploys(service, until)``, most recent first."""
    guided: bool = False
    """Whether the prompt spells out the steps (an easier calibration level)."""
    incident_ids: bool = True
    """Whether ``list_incidents`` shows incident ids. Without them (an easier calibration level) the only
    ids the model sees are deploy ids: with them, untrained Qwen2.5-Coder passed the incident ids to
    ``get_deploy`` and answered one (3 of 3 guided dev examples, CPU; 1 of 3 right without them)."""
    shipper: str = attrs.field(default="owner", validator=attrs.validators.in_(("owner", "others")))
    """Who ships a deploy, so whose team a team question asks for. ``"owner"`` (1.0-1.5): the team
    owning the deploy's service, which ``get_service`` also shows, so with one dependency a team question
    is a coin flip between two owners seen without finding the deploy (answering the alerting
    service's owner scores 0.225 on 1.5.0's hidden eval). ``"others"``: each deploy is shipped by a
    team drawn per deploy from the teams owning no service in the world, shown only by ``get_deploy``."""
    lean_tools: bool = attrs.field(default=False)
    """Whether only ``list_incidents`` and ``list_deploys`` are offered, the two a deploy question
    without a dependency needs (an easier calibration level). With all four, untrained Qwen2.5-Coder
    called ``get_deploy`` with a time or with its docstring's example id after listing the right
    deploys, and answered neither (0 of 4 dev examples, CPU); with two it answered 1 of 5."""

    @lean_tools.validator
    def _lean_fits(self, attribute: Any, value: bool) -> None:
        if value and (self.n_deps or self.questions != ("deploy",) or self.rollback_p):
            raise ValueError("lean_tools needs no dependency, no rollbacks and only deploy questions")

    @property
    def needed_calls(self) -> int:
        """Tool calls a competent solver needs at most (rolled-back decoys need get_deploy checks)."""
        checks = 2 if self.rollback_p > 0 else 1 if "team" in self.questions else 0
        return 2 + (1 + self.n_deps) + checks


def rule(d: Difficulty) -> str:
    """The culprit rule, as the prompt states it."""
    extra = " Deploys that were rolled back do not count." if d.rollback_p > 0 else ""
    return (
        "Rule: the culprit is the most recent deploy made at or before the moment the open incident "
        f"started, to the alerting service itself or to a service it directly depends on.{extra}"
    )


def steps(d: Difficulty, root: str, kind: str) -> str:
    """The triage procedure for the ``guided`` knob, one numbered line per step."""
    where = root if not d.n_deps else f"{root} and for each service it depends on"
    window = (
        "until the time the open incident started (each list starts with the most recent deploy)"
        if d.lookup == "until"
        else 'since "00:00" (each list runs oldest first)'
    )
    todo = [f"Call list_incidents for {root} and note when its open incident started."]
    if d.n_deps:
        todo.append(f"Call get_service for {root} to see the services it depends on.")
    todo.append(f"Call list_deploys for {where}, {window}.")
    pick = "The culprit is the most recent of those deploys made at or before that time"
    todo.append(pick + (", not rolled back (get_deploy shows rolled_back)." if d.rollback_p > 0 else "."))
    if kind == "team":
        todo.append("Call get_deploy for the culprit: its team is the one to page.")
    todo.append(replies(d.incident_ids, d.shipper)[kind])
    return "Steps:\n" + "\n".join(f"{i}. {line}" for i, line in enumerate(todo, 1))


def prompt_for(d: Difficulty, root: str, kind: str) -> str:
    """The alert, the rule, the question (with ``guided``: the steps) and the first call to make."""
    if d.guided:
        return (
            f"The {root} service is alerting: it has an open incident. Find the deploy that caused it.\n"
            f"{rule(d)}\n{steps(d, root, kind)}\n{START.format(service=root)}"
        )
    return (
        f"Service {root} is alerting. Triage it with the tools: find its open incident, then the deploy "
        f"that caused it.\n{rule(d)}\n{asks(d.shipper)[kind]} {START.format(service=root)}"
    )


def hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _free(rng: random.Random, lo: int, hi: int, used: set[int]) -> int | None:
    choices = [m for m in range(lo, hi + 1) if m not in used]
    if not choices:
        return None
    pick = rng.choice(choices)
    used.add(pick)
    return pick


def _world(rng: random.Random, d: Difficulty) -> tuple[dict[str, Any], dict[str, Any]]:
    names = rng.sample(SERVICES, 1 + d.n_deps + d.n_other)
    teams = rng.sample(TEAMS, len(names))
    root, deps, others = names[0], names[1 : 1 + d.n_deps], names[1 + d.n_deps :]
    owner = dict(zip(names, teams, strict=True))
    services = []
    for name in names:
        if name == root:
            depends_on = list(deps)
        else:
            pool = [o for o in others if o != name]
            depends_on = rng.sample(pool, rng.randint(0, min(1, len(pool))))
        services.append({"name": name, "team": owner[name], "depends_on": depends_on})
    start = rng.randint(9 * 60, 20 * 60)
    ids = rng.sample(range(1000, 10000), 3)
    resolved_at = start - rng.randint(120, 480)
    elsewhere, elsewhere_at = rng.choice(others), start - rng.randint(0, 90)
    incidents = [
        {"id": f"INC-{ids[0]}", "service": root, "started": hhmm(start), "status": "open"},
        {"id": f"INC-{ids[1]}", "service": root, "started": hhmm(resolved_at), "status": "resolved"},
        {"id": f"INC-{ids[2]}", "service": elsewhere, "started": hhmm(elsewhere_at), "status": "open"},
    ]
    for incident in incidents:
        incident["summary"] = rng.choice(SYMPTOMS)
    used: set[int] = set()
    related = [root, *deps]
    culprit_service = rng.choice(related)
    culprit_at = _free(rng, start - 60, start - 5, used)
    plan: list[tuple[str, int | None, bool]] = [(culprit_service, culprit_at, False)]
    for name in related:
        for _ in range(rng.randint(*d.earlier)):
            plan.append((name, _free(rng, start - 300, start - 65, used), False))
        if rng.random() < 0.5:
            plan.append((name, _free(rng, start + 1, start + 90, used), False))
    if rng.random() < d.rollback_p:
        plan.append((rng.choice(related), _free(rng, start - 4, start, used), True))
    for name in others:
        plan.append((name, _free(rng, start - 4, start, used), False))
        plan.append((name, _free(rng, start - 300, start + 90, used), False))
    deploy_ids = rng.sample(range(0x1000, 0x10000), len(plan))
    spare = [t for t in TEAMS if t not in teams]
    deploys = [
        {
            "id": f"dep-{deploy_ids[i]:04x}",
            "service": name,
            "at": hhmm(at),
            "team": owner[name] if d.shipper == "owner" else rng.choice(spare),
            "change": rng.choice(CHANGES),
            "rolled_back": rolled_back,
        }
        for i, (name, at, rolled_back) in enumerate(plan)
        if at is not None
    ]
    culprit = dict(deploys[0])
    deploys.sort(key=lambda r: (r["at"], r["id"]))
    world: dict[str, Any] = {"services": services, "incidents": incidents, "deploys": deploys}
    if d.lookup != "since":
        world["lookup"] = d.lookup
    if not d.incident_ids:
        world["incident_ids"] = False
    if d.shipper != "owner":
        world["shipper"] = d.shipper
    if d.lean_tools:
        world["tools"] = "lean"
    return world, culprit


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One example: its world (services, incidents, deploys), the alert in the prompt, and the answer."""
    kind = rng.choice(d.questions)
    world, culprit = _world(rng, d)
    root = world["incidents"][0]["service"]
    prompt = prompt_for(d, root, kind)
    answer = culprit["id"] if kind == "deploy" else culprit["team"]
    return Example(
        id=example_id,
        prompt=prompt,
        answer=answer,
        info={"world": world, "question": {"kind": kind, "service": root}, "culprit": culprit},
    )
