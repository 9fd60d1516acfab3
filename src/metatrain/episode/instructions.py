"""What the agent is told: the system instructions (versioned) and the workspace's TASK.md."""

from __future__ import annotations

import json
from importlib.resources import files

from metatrain.specs import TaskSpec

INSTRUCTIONS_VERSION = "2"
"""Bump when ``instructions.md`` changes meaning; recorded in each run's manifest."""

SYSTEM_INSTRUCTIONS = files("metatrain.episode").joinpath("instructions.md").read_text(encoding="utf-8")
"""The system-prompt template (``{max_attempts}``, ``{max_turns}``), from ``instructions.md``."""


def system_instructions(max_attempts: int, max_turns: int = 30) -> str:
    """The system prompt an agent gets for an episode with these caps."""
    return SYSTEM_INSTRUCTIONS.format(max_attempts=max_attempts, max_turns=max_turns)


JOB_EXAMPLE = """\
family = "{family}"
environment = "env.py"        # workspace-relative module with load_environment()

[env_args]                     # keyword arguments for load_environment()
num_examples = 256

[train]
model = "{model}"
max_steps = 4
rollouts_per_example = 4       # GRPO group size
batch_size = 2                 # prompts per step
max_tokens = 128               # completion tokens per rollout, all turns together
temperature = 1.0
lr = 5e-5
optimizer = "adamw"
scheduler = "constant"
warmup = 0
loss = "grpo"
# advantage_scale = "group"    # rewards -> advantages: minus the group mean, then / group std
                               # ("group"), / batch std ("batch") or nothing ("none")

[train.lora]                   # omit only if full fine-tuning is allowed
rank = 8
alpha = 16
"""


def _final_turn(spec: TaskSpec) -> str:
    if not spec.eval.final_answer_turn:
        return ""
    from metatrain.training.rollout import FINAL_ANSWER_PROMPT

    return (
        " When the last turn comes right after a tool round, it is played without tools, after the user"
        f' message "{FINAL_ANSWER_PROMPT}"'
    )


def task_markdown(spec: TaskSpec) -> str:
    """The TASK.md the agent finds in its workspace."""
    tools = json.dumps([t.model_dump() for t in spec.eval.tools], indent=2)
    bounds = json.dumps(spec.bounds.model_dump(), indent=2)
    dev = "\n".join(json.dumps(e.model_dump()) for e in spec.dev_examples)
    return f"""# Task: {spec.family} (version {spec.version}, budget {spec.budget})

{spec.description}

## Hidden evaluation
{spec.eval_n} examples like the dev examples below, generated from a secret seed. Each is played as a
multi-turn tool conversation: system prompt, user prompt, then up to {spec.eval.max_turns} assistant
turns of at most {spec.eval.max_tokens} tokens, tools executed between turns.{_final_turn(spec)} The final
assistant text is scored. Answer format: {spec.eval.answer_format}
Training plays turns the same way: each is capped at {spec.eval.max_tokens} tokens, and the job's
`max_tokens` caps a rollout's turns together (with TRL, tool results count in it too).

System prompt used by the eval:

```
{spec.eval.system_prompt}
```

Tool-call dialect: the model calls a tool by writing
`<tool_call>{{"name": NAME, "arguments": {{...}}}}</tool_call>`; results come back as tool messages.

Eval tools (your environment must expose exactly these, same names and parameters):

```json
{tools}
```

## Bounds (the probe enforces them)

```json
{bounds}
```

## Job file (job.toml)

```toml
{JOB_EXAMPLE.format(family=spec.family, model=spec.bounds.models[0])}```

## Environment contract (env.py)
- `load_environment(**env_args)` returns `verifiers.ToolEnv(dataset=..., tools=[...],
  rubric=vf.Rubric(funcs=[...], weights=[...]), system_prompt=..., max_turns=...)`;
  classic API only (no `verifiers.v1`).
- Dataset rows: `question` (user prompt), `answer` (string), optional `info` (dict).
- Rubric functions take any of `completion`, `answer`, `info`, `prompt`, `state` and return a float; they must
  not raise on the dev examples (the probe runs them). Reward correct work, not activity.
- Your code runs with no network, no secrets and only the workspace readable.

## Dev examples (JSON lines; also in dev_examples.jsonl)
{dev}
"""
