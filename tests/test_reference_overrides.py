"""``--agent reference:KEY=VALUE,...``: an ablation of a family's reference job from the command line."""

from __future__ import annotations

import json

import pytest

from metatrain.default_plugins.reference_policy import ReferencePolicyFactory, parse_overrides
from metatrain.plugins import load_plugins
from metatrain.protocols import PolicyContext
from metatrain.specs import parse_job_toml


def context(family: str = "multi_hop", budget: str = "full") -> PolicyContext:
    fam = load_plugins().task_family(family)
    return PolicyContext(family=fam, spec=fam.task_spec(budget), budget=budget)


def test_values_parse_as_toml_else_as_strings() -> None:
    assert parse_overrides("train.advantage_scale=batch, train.batch_size=16,train.lr=5e-5") == {
        "train.advantage_scale": "batch",
        "train.batch_size": 16,
        "train.lr": 5e-5,
    }
    assert parse_overrides('env_args.seed=7,train.scheduler="cosine"') == {
        "env_args.seed": 7,
        "train.scheduler": "cosine",
    }


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("train.lr", "is not KEY=VALUE"),
        ("train.lr=", "is not KEY=VALUE"),
        ("=3", "is not KEY=VALUE"),
        ("family=calc_chain", "only keys under"),
        ("environment=other.py", "only keys under"),
        ("train=3", "only keys under"),
    ],
)
def test_malformed_overrides_are_named(arg: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_overrides(arg)


def test_the_policy_writes_the_changed_job_and_nothing_else_changes() -> None:
    ctx = context()
    assert isinstance(load_plugins().policy("reference"), ReferencePolicyFactory)  # what --agent finds
    plain = ReferencePolicyFactory().create(None, ctx).files
    changed = ReferencePolicyFactory().create("train.advantage_scale=batch,train.batch_size=16", ctx).files
    assert changed["env.py"] == plain["env.py"]
    before, after = parse_job_toml(plain["job.toml"]), parse_job_toml(changed["job.toml"])
    assert (after.train.advantage_scale, after.train.batch_size) == ("batch", 16)
    rest = {"advantage_scale", "batch_size"}
    assert after.train.model_dump(exclude=rest) == before.train.model_dump(exclude=rest)
    assert after.model_dump(exclude={"train"}) == before.model_dump(exclude={"train"})
    assert changed["job.toml"].startswith("# Reference job for multi_hop, changed by --agent reference:")
    # the policy submits exactly this file through the agent tools
    policy = ReferencePolicyFactory().create("train.batch_size=16", ctx)
    writes = []
    for _ in range(6):
        turn = policy.next_turn([], [])
        writes += [json.loads(c.arguments) for c in turn.tool_calls if c.name == "write_file"]
    job_toml = next(w["content"] for w in writes if w["path"] == "job.toml")
    assert parse_job_toml(job_toml).train.batch_size == 16


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("train.batch_size=65", r"break the task's bounds: train\.batch_size = 65 is outside"),
        ("train.model=gpt-4", r"break the task's bounds: train\.model = 'gpt-4' is not allowed"),
        ("train.advantage_scale=std", r"invalid job\.toml.*advantage_scale"),
        ("train.batch_sizes=3", r"invalid job\.toml.*batch_sizes"),
        ("train.lora.rank.x=3", r"'rank' is not a table"),
    ],
)
def test_overrides_that_break_the_job_fail_before_the_episode(arg: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReferencePolicyFactory().create(arg, context())
