"""``train.advantage_scale``: how rewards become advantages, in TRL, in prime-rl, and in the bounds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from metatrain.specs import JobFile, TrainingTable, parse_job_toml
from metatrain.training.table import (
    UnsupportedSetting,
    bound_errors,
    primerl_values,
    trl_config_kwargs,
    trl_values,
)

JOB = """\
family = "calc_chain"
[train]
model = "smollm2-135m"
max_steps = 2
rollouts_per_example = 4
batch_size = 2
max_tokens = 96
lr = 5e-5
{line}
"""


def table(line: str = "") -> TrainingTable:
    return parse_job_toml(JOB.format(line=line)).train


def test_unset_leaves_each_backend_its_default() -> None:
    t = table()
    assert t.advantage_scale is None
    assert "scale_rewards" not in trl_values(t)  # TRL's own default, "group"
    assert primerl_values(t)["max_steps"] == 2  # prime-rl's only advantage, centred


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_trl_gets_scale_rewards_and_its_config_accepts_it(scale: str, tmp_path: Any) -> None:
    from trl import GRPOConfig

    t = table(f'advantage_scale = "{scale}"')
    kwargs = trl_config_kwargs(t, output_dir=str(tmp_path), device="cpu", max_turns=3)
    assert kwargs["scale_rewards"] == scale
    assert GRPOConfig(**kwargs).scale_rewards == scale


def test_prime_rl_takes_none_and_refuses_a_std_it_does_not_have() -> None:
    assert "scale_rewards" not in str(primerl_values(table('advantage_scale = "none"')))
    for scale in ("group", "batch"):
        with pytest.raises(UnsupportedSetting, match=rf"advantage_scale = '{scale}'.*minus the group mean"):
            primerl_values(table(f'advantage_scale = "{scale}"'))


def test_unknown_value_is_a_schema_error_and_bounds_can_narrow_the_choice(spec_bounds: Any) -> None:
    with pytest.raises(ValidationError, match="advantage_scale"):
        JobFile.model_validate({"family": "x", "train": {**table().model_dump(), "advantage_scale": "std"}})
    narrowed = spec_bounds.model_copy(update={"advantage_scales": ["none"]})
    errors = bound_errors(table('advantage_scale = "group"'), narrowed)
    assert errors == ["train.advantage_scale = 'group' is not allowed; choose one of ['none']"]
    assert bound_errors(table('advantage_scale = "none"'), narrowed) == []
    assert bound_errors(table(), narrowed) == [  # unset means TRL's "group" or prime-rl's "none"
        "train.advantage_scale must be set to one of ['none']: the backends' defaults differ"
    ]
    assert bound_errors(table(), spec_bounds) == []


@pytest.fixture
def spec_bounds() -> Any:
    from metatrain_families.calc_chain import CalcChain

    return CalcChain().task_spec("fast").bounds
