"""What the agent is told: the system instructions (versioned) and the workspace's TASK.md."""

from __future__ import annotations

import json

from metatrain.specs import TaskSpec

INSTRUCTIONS_VERSION = "1"

SYSTEM_INSTRUCTIONS = """\
You are an ML engineer. Your job: write a complete reinforcement-learning training job that teaches a
small language model the task described in TASK.md, so that the trained model scores well on a hidden
evaluation you will never see.

You work only through tools: list_files, read_file, write_file, edit_file, get_baseline_scores and
submit_job. Write two files in the workspace:
- env.py: a module with load_environment(**kwargs) returning a classic-API verifiers.ToolEnv
  (dataset with question/answer/info columns, the eval tools exactly as specified, a vf.Rubric).
- job.toml: the job file (format in TASK.md), within the bounds in TASK.md.
Then call submit_job. If validation fails you get the errors and may fix and resubmit; attempts are
capped at {max_attempts}.

How you are rewarded: first, the job must validate (a first-try valid submission is worth most;
every extra attempt is worth less). Then job quality: 75% from the trained model's improvement over the
best untrained allowed model (get_baseline_scores), 25% from its absolute hidden-eval score.
"""


def system_instructions(max_attempts: int) -> str:
    return SYSTEM_INSTRUCTIONS.format(max_attempts=max_attempts)


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

[train.lora]                   # omit only if full fine-tuning is allowed
rank = 8
alpha = 16
"""


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
turns of at most {spec.eval.max_tokens} tokens, tools executed between turns. The final assistant text
is scored. Answer format: {spec.eval.answer_format}

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
