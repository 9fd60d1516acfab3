"""The triage family (held out): generator, scorer, tools, hidden-eval solvability, reference job."""

from __future__ import annotations

import ast
import asyncio
import copy
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from family_helpers import (
    BUDGETS,
    assert_deterministic,
    assert_reference_job_within_bounds,
    assert_schemas_match,
    assert_split_sized_and_disjoint,
    load_env_module,
    probe_reference_job,
    write_reference_job,
)

from metatrain.plugins import load_plugins
from metatrain.protocols import TaskFamily
from metatrain.specs import Example
from metatrain.training.environment import to_vf_messages
from metatrain_families.common import tool_schemas
from metatrain_families.triage import DIFFICULTY, SHIPPED, TEAMS_LEVEL, UNGUIDED_1_4, Triage
from metatrain_families.triage.generator import generate_example
from metatrain_families.triage.tools import TOOLS, minutes, tools_for

FAMILY = Triage()
Call = tuple[str, dict[str, Any]]


def open_incident_start(incidents: list[dict[str, Any]]) -> str:
    """When the open incident of a ``list_incidents`` result started."""
    return next(i["started"] for i in incidents if i["status"] == "open")


def solve_calls(
    call: Callable[[str, dict[str, Any]], Any], prompt: str, lookup: str = "since", lean: bool = False
) -> tuple[str, list[Call]]:
    """Triage as a competent on-call engineer would, from the prompt and tool results alone;
    ``lookup`` is the window ``list_deploys`` takes (its schema's parameter); ``lean``: only the
    incident and deploy lists are offered (a level without dependencies)."""
    made: list[Call] = []

    def tool(tool_name: str, **args: Any) -> Any:
        made.append((tool_name, args))
        return call(tool_name, args)

    m = re.match(r"Service (\S+) is alerting|The (\S+) service is alerting", prompt)
    assert m
    root = m.group(1) or m.group(2)
    started = open_incident_start(tool("list_incidents", service=root))
    deps = [] if lean else tool("get_service", name=root)["depends_on"]
    window = {"since": "00:00"} if lookup == "since" else {"until": started}
    candidates = [
        d for s in [root, *deps] for d in tool("list_deploys", service=s, **window)
        if minutes(d["at"]) <= minutes(started)
    ]  # fmt: skip
    for deploy in sorted(candidates, key=lambda d: minutes(d["at"]), reverse=True):
        if "rolled back" not in prompt and "team to page" not in prompt:
            return deploy["id"], made
        detail = tool("get_deploy", deploy_id=deploy["id"])
        if not detail["rolled_back"]:
            return (detail["team"] if "team to page" in prompt else detail["id"]), made
    raise AssertionError("no culprit found")


def solve(family: Triage, example: Example) -> tuple[str, int]:
    tools: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in family.tools_for(example)}
    lookup = example.info["world"].get("lookup", "since")
    lean = example.info["world"].get("tools") == "lean"
    answer, made = solve_calls(lambda name, args: tools[name](**args), example.prompt, lookup, lean)
    return answer, len(made)


LEVELS = FAMILY.calibration_levels("full")
GUIDED = [label for label in LEVELS if label.startswith("guided")]


def test_registered_and_held_out() -> None:
    family = load_plugins().task_family("triage")
    assert isinstance(family, TaskFamily)
    assert (family.name, family.version, family.held_out) == ("triage", "1.7.0", True)
    assert family.task_spec("fast").held_out
    assert family.baselines_path().name == "triage.json"
    with pytest.raises(ValueError):
        family.hidden_eval("huge")


@pytest.mark.parametrize("budget", BUDGETS)
def test_generator_is_deterministic_per_seed(budget: str) -> None:
    assert_deterministic(FAMILY, generate_example, DIFFICULTY, budget, whole_spec=True)


@pytest.mark.parametrize("budget", BUDGETS)
def test_dev_and_hidden_eval_are_disjoint(budget: str) -> None:
    _, hidden = assert_split_sized_and_disjoint(
        FAMILY, budget, key=lambda e: json.dumps(e.info["world"], sort_keys=True)
    )
    assert len({e.id for e in hidden}) == len(hidden)


@pytest.mark.parametrize("budget", BUDGETS)
def test_scorer_is_exact(budget: str) -> None:
    for ex in FAMILY.task_spec(budget).dev_examples + FAMILY.hidden_eval(budget)[:40]:
        assert FAMILY.score(ex, f"It was this one. <answer>{ex.answer}</answer>") == 1.0
        assert FAMILY.score(ex, f"<answer> '{ex.answer.upper()}'. </answer>") == 1.0
        assert FAMILY.score(ex, ex.answer) == 0.0
        assert FAMILY.score(ex, f"<answer>{ex.answer}x</answer>") == 0.0
        wrong = next(d for d in ex.info["world"]["deploys"] if d["id"] != ex.info["culprit"]["id"])
        assert FAMILY.score(ex, f"<answer>{wrong['id']}</answer>") == 0.0
        if ex.info["question"]["kind"] == "team":
            assert FAMILY.score(ex, f"<answer>team {ex.answer}</answer>") == 1.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_tool_schemas_match_the_implementations(budget: str) -> None:
    """``fast`` offers all four tools; ``full`` (since 1.7.0) the incident and deploy lists alone."""
    spec = FAMILY.task_spec(budget)
    four = tool_schemas(tools_for("until", incident_ids=False))
    expected = four if budget == "fast" else [t for t in four if t.name in ("list_incidents", "list_deploys")]
    assert spec.eval.tools == expected
    assert_schemas_match(spec.eval.tools, FAMILY.tools_for(spec.dev_examples[0]))


def test_tools_never_share_state_and_leave_info_alone() -> None:
    example = FAMILY.task_spec("fast").dev_examples[0]
    before = copy.deepcopy(example.info)
    first = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    second = {fn.__name__: fn for fn in FAMILY.tools_for(example)}
    root = example.info["question"]["service"]
    first["get_service"](name=root)["depends_on"].append("evil")
    first["get_deploy"](deploy_id=example.info["culprit"]["id"])["rolled_back"] = True
    assert "evil" not in second["get_service"](name=root)["depends_on"]
    assert "evil" not in first["get_service"](name=root)["depends_on"]
    assert first["get_deploy"](deploy_id=example.info["culprit"]["id"])["rolled_back"] is False
    assert example.info == before


def test_tool_errors_are_helpful() -> None:
    tools = {fn.__name__: fn for fn in FAMILY.tools_for(FAMILY.task_spec("fast").dev_examples[0])}
    with pytest.raises(ValueError, match="no service named 'nope'; services: "):
        tools["get_service"](name="nope")
    with pytest.raises(ValueError, match="HH:MM"):
        tools["list_deploys"](
            service=FAMILY.task_spec("fast").dev_examples[0].info["question"]["service"], until="2pm"
        )
    with pytest.raises(ValueError, match="list_deploys"):
        tools["get_deploy"](deploy_id="dep-zzzz")


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_hidden_eval_example_is_solvable_with_the_tools(budget: str) -> None:
    most = 0
    for ex in FAMILY.hidden_eval(budget) + FAMILY.task_spec(budget).dev_examples:
        answer, calls = solve(FAMILY, ex)
        assert answer == ex.answer, ex.prompt
        assert FAMILY.score(ex, f"<answer>{answer}</answer>") == 1.0
        most = max(most, calls)
    # needed_calls counts a get_service call for the alerting service, which a level without a
    # dependency can skip: ``full`` (no dependency since 1.7.0) has that one spare turn
    spare = 1 if DIFFICULTY[budget].n_deps == 0 else 0
    assert most + 2 + spare == FAMILY.task_spec(budget).eval.max_turns


@pytest.mark.parametrize("label", list(LEVELS))
def test_every_level_is_solvable_in_its_turns_with_its_tools(label: str) -> None:
    level = LEVELS[label]
    spec = level.task_spec("full")
    assert_schemas_match(spec.eval.tools, level.tools_for(spec.dev_examples[0]))
    most = 0
    for ex in level.hidden_eval("full")[:60] + spec.dev_examples:
        answer, calls = solve(level, ex)
        assert answer == ex.answer, ex.prompt
        most = max(most, calls)
    assert most + 2 <= spec.eval.max_turns


def test_guided_levels_spell_out_the_steps_and_list_deploys_until_a_time() -> None:
    assert GUIDED
    for label in GUIDED:
        level = LEVELS[label]
        d = level.knobs("full")
        (deploys,) = [t for t in level.task_spec("full").eval.tools if t.name == "list_deploys"]
        assert list(deploys.parameters["properties"]) == ["service", "until"]
        for ex in level.task_spec("full").dev_examples:
            root = ex.info["question"]["service"]
            assert ex.prompt.startswith(f"The {root} service is alerting")
            assert "Steps:\n1. Call list_incidents for " + root in ex.prompt
            assert ("Call get_service for" in ex.prompt) == (d.n_deps > 0)
            assert ex.prompt.endswith(
                f"inside <answer></answer> tags.\nStart now: call list_incidents for {root}."
            )
            assert ex.answer not in ex.prompt
            tools = {fn.__name__: fn for fn in level.tools_for(ex)}
            started = open_incident_start(tools["list_incidents"](service=root))
            listed = tools["list_deploys"](service=ex.info["culprit"]["service"], until=started)
            assert listed[0]["id"] == ex.info["culprit"]["id"]
            assert [minutes(r["at"]) for r in listed] == sorted(
                (minutes(r["at"]) for r in listed), reverse=True
            )
            assert all(minutes(r["at"]) <= minutes(started) for r in listed)
            if "get_deploy" in tools:
                with pytest.raises(ValueError, match=r"list_deploys\(service, until\)"):
                    tools["get_deploy"](deploy_id="INC-1234")
    unguided = LEVELS["1 dependency, deploy"].task_spec("full")
    assert all("lookup" not in ex.info["world"] for ex in unguided.dev_examples)
    assert unguided.eval.tools == tool_schemas(TOOLS)


def test_the_two_tool_level_offers_the_incident_and_deploy_lists_alone(tmp_path: Path) -> None:
    """Its eval tool interface, its examples' tools and its reference environment agree; a lean
    level that would need get_service or get_deploy is refused."""
    level = LEVELS["guided, no dependency, deploy, incidents without ids, two tools"]
    spec = level.task_spec("full")
    assert [t.name for t in spec.eval.tools] == ["list_incidents", "list_deploys"]
    env = _load_env_module(write_reference_job(level, "full", tmp_path / "ws-lean"))
    assert [fn.__name__ for fn in env.TOOLS] == ["list_incidents", "list_deploys"]
    for ex in spec.dev_examples:
        assert ex.info["world"]["tools"] == "lean"
        assert [fn.__name__ for fn in level.tools_for(ex)] == ["list_incidents", "list_deploys"]
        assert "get_service" not in ex.prompt and "get_deploy" not in ex.prompt
    assert all("tools" not in ex.info["world"] for ex in FAMILY.task_spec("fast").dev_examples)
    d = level.knobs("full")
    for bad in ({"n_deps": 1}, {"questions": ("deploy", "team")}, {"rollback_p": 0.3}):
        with pytest.raises(ValueError, match="lean_tools needs no dependency"):
            attrs.evolve(d, **bad)


def test_shipped_knobs_are_the_nearest_level_to_the_band() -> None:
    with pytest.raises(ValueError, match="lookup"):
        attrs.evolve(DIFFICULTY["full"], lookup="before")
    assert SHIPPED.endswith("incidents without ids, two tools")
    assert DIFFICULTY["full"] == LEVELS[SHIPPED].knobs("full")
    assert LEVELS[SHIPPED] is FAMILY
    assert TEAMS_LEVEL.endswith("incidents without ids, deploys shipped by other teams")
    assert DIFFICULTY["fast"] == attrs.evolve(LEVELS[TEAMS_LEVEL].knobs("full"), questions=("deploy",))
    unguided = LEVELS["1 dependency, deploy/team, deploys shipped by other teams"].knobs("full")
    assert attrs.evolve(unguided, shipper="owner") == UNGUIDED_1_4["full"]
    assert (UNGUIDED_1_4["full"].lookup, UNGUIDED_1_4["full"].guided) == ("since", False)


def owners_seen(family: Triage, example: Example) -> set[str]:
    """The teams ``get_service`` shows for the alerting service and its direct dependencies."""
    tools = {fn.__name__: fn for fn in family.tools_for(example)}
    root = tools["get_service"](name=example.info["question"]["service"])
    return {root["team"], *(tools["get_service"](name=s)["team"] for s in root["depends_on"])}


def test_teams_that_ship_deploys_own_no_service_so_no_owner_is_the_answer() -> None:
    """Answering a team question with the alerting service's owner, without finding the deploy, scored
    0.225 on 1.5.0's hidden eval (its knobs: deploys shipped by their service's owner). Since 1.6.0 every
    level asking team questions has deploys other teams ship: the answer is only in get_deploy, and is
    never a team ``get_service`` shows."""
    teams_level = LEVELS[TEAMS_LEVEL]  # 1.6.0's full
    owners_ship = FAMILY.at_knobs("full", attrs.evolve(teams_level.knobs("full"), shipper="owner"))
    evals = owners_ship.hidden_eval("full")
    root_owner = [ex for ex in evals if solve_root_owner(owners_ship, ex) == ex.answer]
    assert len(root_owner) / len(evals) > 0.15
    level = LEVELS[TEAMS_LEVEL]
    assert not [ex for ex in level.hidden_eval("full") if solve_root_owner(level, ex) == ex.answer]
    twins = [label for label in LEVELS if label.endswith("deploys shipped by other teams")]
    assert len(twins) == 6
    team_levels = [label for label in LEVELS if "team" in LEVELS[label].knobs("full").questions]
    assert sorted(team_levels) == sorted(twins)
    for label in twins:
        level = LEVELS[label]
        assert level.knobs("full").shipper == "others"
        teams = [ex for ex in level.hidden_eval("full")[:60] if ex.info["question"]["kind"] == "team"]
        assert teams
        for ex in teams:
            assert ex.answer not in owners_seen(level, ex)
            tools = {fn.__name__: fn for fn in level.tools_for(ex)}
            assert tools["get_deploy"](deploy_id=ex.info["culprit"]["id"])["team"] == ex.answer
            assert "team (the team that shipped it)" in (tools["get_deploy"].__doc__ or "")
            assert "the team that shipped the culprit deploy" in ex.prompt


def solve_root_owner(family: Triage, example: Example) -> str:
    """The shortcut: the alerting service's owning team, one get_service call, no deploy looked at."""
    tools = {fn.__name__: fn for fn in family.tools_for(example)}
    return str(tools["get_service"](name=example.info["question"]["service"])["team"])


def test_levels_without_incident_ids_show_the_model_no_incident_id() -> None:
    unnamed = [label for label in LEVELS if "incidents without ids" in label]
    assert len(unnamed) == 5
    for label in unnamed:
        level = LEVELS[label]
        spec = level.task_spec("full")
        (incidents,) = [t for t in spec.eval.tools if t.name == "list_incidents"]
        assert "id" not in incidents.description.replace("incident", "")
        for ex in spec.dev_examples:
            assert "INC-" not in ex.prompt
            assert ex.info["world"]["incident_ids"] is False
            tools = {fn.__name__: fn for fn in level.tools_for(ex)}
            listed = tools["list_incidents"](service=ex.info["question"]["service"])
            assert listed and all(set(i) == {"started", "status", "summary"} for i in listed)
            with pytest.raises(TypeError, match=r"^list_deploys\(\) missing"):
                tools["list_deploys"](until="12:00")  # the name the model calls, not the module's
    with_ids = LEVELS["guided, 1 dependency, deploy"]
    ex = with_ids.task_spec("full").dev_examples[0]
    tools = {fn.__name__: fn for fn in with_ids.tools_for(ex)}
    listed = tools["list_incidents"](service=ex.info["question"]["service"])
    assert all(i["id"].startswith("INC-") for i in listed)


# ---- the reference job ----


def _workspace(tmp_path: Path, budget: str) -> Path:
    return write_reference_job(FAMILY, budget, tmp_path / f"ws-{budget}")


def _load_env_module(ws: Path) -> ModuleType:
    return load_env_module(ws, f"triage_env_{ws.name}")


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_parses_and_is_within_bounds(budget: str) -> None:
    assert_reference_job_within_bounds(FAMILY, budget, whole_job=True)


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_env_mirrors_the_generator(budget: str, tmp_path: Path) -> None:
    env = _load_env_module(_workspace(tmp_path, budget))
    for seed in range(30):
        row = env._example(random.Random(seed))
        ex = generate_example(random.Random(seed), DIFFICULTY[budget], "x")
        assert (row["question"], row["answer"], row["info"]) == (ex.prompt, ex.answer, ex.info)


@pytest.mark.parametrize("label", GUIDED)
def test_reference_env_mirrors_a_guided_level(label: str, tmp_path: Path) -> None:
    level = LEVELS[label]
    env = _load_env_module(write_reference_job(level, "full", tmp_path / "ws-guided"))
    for seed in range(30):
        row = env._example(random.Random(seed))
        ex = generate_example(random.Random(seed), level.knobs("full"), "x")
        assert (row["question"], row["answer"], row["info"]) == (ex.prompt, ex.answer, ex.info)
    world = copy.deepcopy(ex.info["world"])
    tools = {fn.__name__: fn for fn in level.tools_for(ex)}
    service = ex.info["question"]["service"]
    assert env.list_incidents(world, service) == tools["list_incidents"](service=service)
    assert ("id, started" in env.list_incidents.__doc__) == level.knobs("full").incident_ids
    assert ("team (the team that shipped it)" in env.get_deploy.__doc__) == (
        level.knobs("full").shipper == "others"
    )
    started = open_incident_start(env.list_incidents(world, service))
    assert env.list_deploys(world, ex.info["culprit"]["service"], until=started) == tools["list_deploys"](
        service=ex.info["culprit"]["service"], until=started
    )


def test_reference_env_rollout_and_rubric(tmp_path: Path) -> None:
    import verifiers as vf
    from verifiers.types import AssistantMessage, ToolCall

    module = _load_env_module(_workspace(tmp_path, "full"))
    env = module.load_environment(num_examples=4)
    for ex in FAMILY.task_spec("full").dev_examples:
        info = copy.deepcopy(ex.info)
        state = vf.State(input={"prompt": [], "answer": ex.answer, "info": info, "example_id": 0})
        completion: list[Any] = []

        def call(
            name: str, args: dict[str, Any], completion: list[Any] = completion, state: Any = state
        ) -> Any:
            msg = AssistantMessage(
                content="",
                tool_calls=[ToolCall(id=f"c{len(completion)}", name=name, arguments=json.dumps(args))],
            )
            completion.append(msg)
            reply = asyncio.run(env.env_response([msg], state))
            completion.extend(reply)
            return ast.literal_eval(reply[0].content)  # verifiers shows str(result)

        lean = info["world"].get("tools") == "lean"
        answer, _ = solve_calls(call, ex.prompt, info["world"]["lookup"], lean)
        assert answer == ex.answer and info == ex.info
        completion.append(vf.AssistantMessage(content=f"<answer>{answer}</answer>"))
        assert module.correct_answer(completion, ex.answer) == 1.0
        assert module.culprit_seen(completion, info) == 1.0
        scan = list(completion)
        for s in info["world"]["services"]:
            args = json.dumps({"service": s["name"], "until": "23:59"})
            scan.append(
                AssistantMessage(
                    content="", tool_calls=[ToolCall(id="s", name="list_deploys", arguments=args)]
                )
            )
        assert module.culprit_seen(scan, info) == 0.0
        no_tools = to_vf_messages([{"role": "assistant", "content": "<answer>dep-0000</answer>"}])
        assert module.correct_answer(no_tools, ex.answer) == module.culprit_seen(no_tools, info) == 0.0


@pytest.mark.parametrize("budget", BUDGETS)
def test_reference_job_passes_the_validation_probe(budget: str, tmp_path: Path) -> None:
    scores = probe_reference_job(FAMILY, budget, tmp_path / f"ws-{budget}")
    assert not any(scores["culprit_seen"])
