"""Checks the built-in task-family test files share (generator, eval split, schemas, reference job)."""

from __future__ import annotations

import importlib.util
import inspect
import random
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from metatrain.episode.probe import validate_submission
from metatrain.episode.workspace import Workspace
from metatrain.specs import Example, JobFile, TaskSpec, ToolSchema, parse_job_toml
from metatrain.training.table import bound_errors

BUDGETS = ["fast", "full"]
EVAL_N = {"fast": 48, "full": 200}
Generator = Callable[[random.Random, Any, str], Example]


def assert_deterministic(
    family: Any, generate: Generator, difficulty: Mapping[str, Any], budget: str, *, whole_spec: bool = False
) -> None:
    """Same seed, same examples; another seed, another example; hidden eval and dev examples are stable."""
    d = difficulty[budget]
    a = [generate(random.Random(7), d, "x") for _ in range(3)]
    b = [generate(random.Random(7), d, "x") for _ in range(3)]
    assert a == b
    assert generate(random.Random(8), d, "x") != a[0]
    assert family.hidden_eval(budget) == family.hidden_eval(budget)
    if whole_spec:
        assert family.task_spec(budget) == family.task_spec(budget)
    else:
        assert family.task_spec(budget).dev_examples == family.task_spec(budget).dev_examples


def assert_split_sized_and_disjoint(
    family: Any, budget: str, key: Callable[[Example], Hashable] = lambda e: e.prompt
) -> tuple[TaskSpec, list[Example]]:
    """Five dev examples, ``eval_n`` hidden ones, no dev ``key`` among the hidden ones; both returned."""
    spec: TaskSpec = family.task_spec(budget)
    hidden: list[Example] = family.hidden_eval(budget)
    assert len(spec.dev_examples) == 5 and len(hidden) == spec.eval_n == EVAL_N[budget]
    assert not {key(e) for e in spec.dev_examples} & {key(e) for e in hidden}
    return spec, hidden


def assert_schemas_match(schemas: Iterable[ToolSchema], tools: Iterable[Callable[..., Any]]) -> None:
    """Each schema names and describes its tool and lists its parameters (``world`` hidden), all required."""
    for schema, fn in zip(schemas, tools, strict=True):
        params = [p for p in inspect.signature(fn).parameters if p != "world"]
        assert schema.name == fn.__name__
        assert "world" not in schema.parameters["properties"]
        assert list(schema.parameters["properties"]) == params == schema.parameters["required"]
        assert schema.description


def write_reference_job(family: Any, budget: str, directory: Path) -> Path:
    """The family's reference job files written into ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in family.reference_job(budget).items():
        (directory / name).write_text(text)
    return directory


def load_env_module(workspace: Path, name: str) -> ModuleType:
    """Import a workspace's ``env.py`` under ``name``."""
    spec = importlib.util.spec_from_file_location(name, workspace / "env.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_reference_job_within_bounds(family: Any, budget: str, *, whole_job: bool = False) -> JobFile:
    """The reference ``job.toml`` parses, names the family and sits inside the budget's bounds.

    With ``whole_job`` its dataset size (``num_examples``) and the eval's turn limit are checked too.
    """
    spec: TaskSpec = family.task_spec(budget)
    job = parse_job_toml(family.reference_job(budget)["job.toml"])
    assert job.family == family.name
    limits: dict[str, Any] = {}
    if whole_job:
        limits = {"dataset_size": job.env_args["num_examples"], "max_turns": spec.eval.max_turns}
    assert bound_errors(job.train, spec.bounds, **limits) == []
    return job


def probe_reference_job(family: Any, budget: str, directory: Path) -> dict[str, list[float]]:
    """Run the validation probe on the reference job; it must pass; the rubric scores it reports.

    The probe scores every dev example twice, right answer first; the second must score zero.
    """
    workspace = Workspace(write_reference_job(family, budget, directory))
    outcome = validate_submission(workspace, family.task_spec(budget))
    assert outcome.report.ok, outcome.report.errors
    scores = outcome.report.checks["rubric_scores"]
    assert isinstance(scores, dict)
    answers = scores["correct_answer"]
    assert answers and answers[0::2] == [1.0] * (len(answers) // 2)
    assert set(answers[1::2]) == {0.0}
    return scores
