"""Pieces every built-in family shares: answer parsing, templates, baselines, bounds and the family shape."""

from __future__ import annotations

import copy
import inspect
import random
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast, get_type_hints

import attrs

from metatrain.specs import Bounds, EvalInterface, Example, FloatRange, IntRange, TaskSpec, ToolSchema
from metatrain_families.secret import eval_seed

ANSWER_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` block, or None."""
    found = ANSWER_RE.findall(text)
    return found[-1].strip() if found else None


def normalise_int(text: str | None) -> int | None:
    """Parse an integer answer: surrounding spaces, a leading '+' and thousands commas are allowed."""
    if text is None:
        return None
    cleaned = text.strip().replace(",", "").replace("_", "")
    cleaned = cleaned.removeprefix("+")
    if re.fullmatch(r"-?\d+", cleaned):
        return int(cleaned)
    return None


def render_template(package: str, name: str, **values: object) -> str:
    """Fill a ``$name`` template shipped in ``package``."""
    text = resources.files(package).joinpath(name).read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def baselines_file(family: str) -> Path:
    return Path(str(resources.files("metatrain_families").joinpath("baselines", f"{family}.json")))


WORLD_ARG = "world"


def bind_world(fn: Callable[..., Any], world: Any) -> Callable[..., Any]:
    """``fn(world, **args)`` bound to one example's world.

    The result keeps ``fn``'s name and docstring and drops ``world`` from its signature, so its
    JSON schema is the tool the model sees. Stateless tools (no ``world`` parameter) come back as is.
    """
    sig = inspect.signature(fn)
    if WORLD_ARG not in sig.parameters:
        return fn

    def bound(**kwargs: Any) -> Any:
        return fn(world, **kwargs)

    bound.__name__ = fn.__name__
    bound.__doc__ = fn.__doc__
    bound.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for n, p in sig.parameters.items() if n != WORLD_ARG]
    )
    bound.__annotations__ = {k: v for k, v in get_type_hints(fn).items() if k != WORLD_ARG}
    return bound


def named_as(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` as the model sees it: ``name`` in its schema and in a call's TypeError (a level that swaps
    in another implementation keeps the tool's name; ``__qualname__`` too, or a call missing an
    argument is answered with the implementation's name)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def tool_schemas(tools: Iterable[Callable[..., Any]]) -> list[ToolSchema]:
    """The eval tool interface: each tool's JSON schema as the model sees it (``world`` hidden)."""
    from transformers.utils import get_json_schema

    return [ToolSchema.model_validate(get_json_schema(bind_world(fn, None))["function"]) for fn in tools]


MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
FAST_MODELS = ["smollm2-135m", "gemma3-270m"]
"""The ``fast`` (CPU) variant leaves out the 0.5B model: on two CPU cores its untrained pass over
calc_chain's 48-example fast eval took 927 s against 109 s (SmolLM2) and 55 s (Gemma 3)."""
EVAL_N = {"fast": 48, "full": 200}
N_DEV = 5
MAX_DRAWS_PER_EXAMPLE = 20


FULL_MAX_TOKENS = 1024
"""The ``full`` bound on a job's ``max_tokens``: completion tokens per rollout, all turns together."""
TOOL_ROUND_TOKENS = 64
"""Tokens one tool round adds to a training completion: TRL counts the tool results' tokens in it."""


def rollout_token_budget(eval_turns: int, eval_tokens_per_turn: int, cap: int) -> int:
    """A job's ``max_tokens`` that lets a training rollout run as long as an eval rollout may.

    The table's ``max_tokens`` caps a whole rollout (every turn, and under TRL the tool results
    too), while the eval gives ``eval_tokens_per_turn`` to each of ``eval_turns`` turns. On an H200
    a ``full`` calc_chain job with 192 tokens cut 41% of its first step's rollouts short and none
    was right, while the same model was right on 10% of the hidden eval (docs/families.md).
    """
    return min(cap, eval_turns * (eval_tokens_per_turn + TOOL_ROUND_TOKENS))


def standard_bounds(budget: str, models: Sequence[str], max_turns: int) -> Bounds:
    """The search bounds every built-in family offers at ``budget``; only the turn cap differs."""
    fast = budget == "fast"
    return Bounds(
        models=list(models),
        max_steps=IntRange(min=1, max=8 if fast else 200),
        rollouts_per_example=IntRange(min=2, max=8 if fast else 16),
        batch_size=IntRange(min=1, max=8 if fast else 64),
        max_tokens=IntRange(min=16, max=256 if fast else FULL_MAX_TOKENS),
        temperature=FloatRange(min=0.1, max=2.0),
        lr=FloatRange(min=1e-7, max=1e-3),
        warmup=IntRange(min=0, max=10 if fast else 50),
        lora_rank=IntRange(min=1, max=64),
        dataset_size=IntRange(min=4, max=2000 if fast else 20000),
        max_turns=IntRange(min=1, max=max_turns),
        optimizers=["adamw", "sgd", "adafactor"],
        schedulers=["constant", "linear", "cosine"],
        losses=["grpo", "dr_grpo", "dapo", "bnpo"],
        full_finetune_allowed=not fast,
    )


def reference_job_values(budget: str, full_max_tokens: int) -> dict[str, object]:
    """Values for a family's ``reference_job.toml.tmpl``: a tiny run at ``fast``, a real one at ``full``.

    ``full`` is sized for a job of at most 10 minutes on one H200 (10-40 GRPO steps): eight prompts
    a step and sampling at 0.7, so that groups of rollouts from a model right 5-10% of the time
    greedily differ often enough to give a gradient, and a LoRA learning rate of 1e-4: at 2e-4 one
    H200 run's string_pipeline fell from 0.85 training reward to 0.1 at step 12 and diverged at
    step 21, and ledger collapsed after its first update, while at 1e-4 neither did (docs/families.md).
    """
    fast = budget == "fast"
    return {
        "model": "smollm2-135m" if fast else "qwen2.5-coder-0.5b",
        "num_examples": 64 if fast else 2000,
        "max_steps": 2 if fast else 40,
        "rollouts": 4 if fast else 8,
        "batch_size": 2 if fast else 8,
        "max_tokens": 96 if fast else full_max_tokens,
        "lr": "5e-5" if fast else "1e-4",
        "temperature": "1.0" if fast else "0.7",
        "rank": 8 if fast else 16,
        "alpha": 16 if fast else 32,
    }


D = TypeVar("D")


class GeneratedFamily(Generic[D]):
    """The shape of a built-in family: examples drawn per budget from knobs ``D`` by a seeded generator.

    A subclass is an attrs class with ``name``, ``version`` and ``held_out`` fields; it sets the class
    variables below and supplies ``generate``, ``describe``, ``max_turns``, ``turn_cap``, ``env_values``
    and ``score``. Dev examples come from ``name|version|dev``, hidden ones from the eval seed.
    """

    name: str
    version: str
    held_out: bool

    difficulty: ClassVar[Mapping[str, Any]]
    tools: ClassVar[Sequence[Callable[..., Any]]]
    system_prompt: ClassVar[str]
    answer_format: ClassVar[str]
    max_tokens: ClassVar[int]
    templates: ClassVar[str]
    """The package holding ``reference_env.py.tmpl`` and ``reference_job.toml.tmpl``."""
    final_answer_turn: ClassVar[bool] = True
    """Whether the eval's last turn after a tool round is a tool-free answer turn (a version bump).

    On since the 1.1/1.2 versions: untrained Qwen2.5-Coder called tools until the turn cap on four
    families and never answered (docs/families.md, calibration)."""
    levels: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Candidate knobs per budget for ``metatrain calibrate``, hardest first: label -> knobs."""
    models: ClassVar[Sequence[str]] = MODELS
    fast_models: ClassVar[Sequence[str]] = FAST_MODELS
    eval_n: ClassVar[Mapping[str, int]] = EVAL_N

    @staticmethod
    def generate(rng: random.Random, d: D, example_id: str) -> Example:
        raise NotImplementedError

    def describe(self, d: D) -> str:
        raise NotImplementedError

    def max_turns(self, d: D) -> int:
        """Tool rounds the eval allows."""
        raise NotImplementedError

    def turn_cap(self, d: D) -> int:
        """The largest ``max_turns`` the bounds allow."""
        raise NotImplementedError

    def env_values(self, d: D) -> dict[str, object]:
        """Template values of the reference env besides ``system_prompt`` and ``max_turns``."""
        raise NotImplementedError

    def score(self, example: Example, final_text: str) -> float:
        raise NotImplementedError

    def system_prompt_at(self, d: D) -> str:
        """The eval's system prompt at knobs ``d``: the class's ``system_prompt`` unless a knob changes it."""
        return self.system_prompt

    def answer_format_at(self, d: D) -> str:
        """The answer format at knobs ``d``: the class's ``answer_format`` unless a knob changes it."""
        return self.answer_format

    def tools_at(self, d: D) -> Sequence[Callable[..., Any]]:
        """The eval tools at knobs ``d``: the class's ``tools`` unless a knob swaps one."""
        return self.tools

    def example_tools(self, example: Example) -> Sequence[Callable[..., Any]]:
        """The unbound eval tools ``example`` is played with: the class's ``tools`` unless a knob
        swapped one (the example's world then says which)."""
        return self.tools

    def knobs(self, budget: str) -> D:
        """The generator knobs for ``budget``; an unknown budget is a ValueError."""
        if budget not in self.difficulty:
            raise ValueError(f"unknown budget {budget!r}; choose one of {sorted(self.difficulty)}")
        knobs: D = self.difficulty[budget]
        return knobs

    def calibration_levels(self, budget: str) -> dict[str, GeneratedFamily[D]]:
        """The family at each candidate level of ``budget``, hardest first; the level equal to the
        current knobs is this family itself (``current`` first when no level equals them)."""
        current = self.knobs(budget)
        declared = dict(self.levels.get(budget, {}))
        out: dict[str, GeneratedFamily[D]] = {}
        if current not in declared.values():
            out["current"] = self
        for label, knobs in declared.items():
            out[label] = self if knobs == current else self.at_knobs(budget, knobs)
        return out

    def at_knobs(self, budget: str, knobs: D) -> GeneratedFamily[D]:
        """A copy of this family (same name, version and secret) whose ``budget`` draws use ``knobs``:
        for calibration only, since its examples are not the ones the version's baselines score."""
        cls = type(self)
        body = {"difficulty": {**self.difficulty, budget: knobs}, "__module__": cls.__module__}
        variant = type(cls.__name__, (cls,), body)
        fields = {f.name: getattr(self, f.name) for f in attrs.fields(cast(Any, cls))}
        made: GeneratedFamily[D] = variant(**fields)
        return made

    def dev_examples(self, budget: str) -> list[Example]:
        """The public dev examples, drawn from ``name|version|dev``."""
        d = self.knobs(budget)
        rng = random.Random(f"{self.name}|{self.version}|dev")
        return [self.generate(rng, d, f"{self.name}-dev-{i}") for i in range(N_DEV)]

    def task_spec(self, budget: str) -> TaskSpec:
        d = self.knobs(budget)
        dev = self.dev_examples(budget)
        return TaskSpec(
            family=self.name,
            version=self.version,
            description=self.describe(d),
            budget=budget,
            held_out=self.held_out,
            eval=EvalInterface(
                tools=tool_schemas(self.tools_at(d)),
                system_prompt=self.system_prompt_at(d),
                answer_format=self.answer_format_at(d),
                max_turns=self.max_turns(d),
                max_tokens=self.max_tokens,
                final_answer_turn=self.final_answer_turn,
            ),
            bounds=standard_bounds(
                budget, self.fast_models if budget == "fast" else self.models, self.turn_cap(d)
            ),
            dev_examples=dev,
            eval_n=self.eval_n[budget],
        )

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        """The tools bound to one fresh copy of the example's world, shared by all of them."""
        world = copy.deepcopy(example.info["world"])
        return [bind_world(fn, world) for fn in self.example_tools(example)]

    def hidden_eval(self, budget: str) -> list[Example]:
        """``eval_n`` examples from the secret seed; a draw whose prompt is a dev prompt is skipped.

        The dev examples are public, so an eval example with the same prompt would be a leak even
        when its world differs; small prompt spaces (names x relations) make such draws likely.
        """
        d = self.knobs(budget)
        public = {e.prompt for e in self.dev_examples(budget)}
        rng = random.Random(eval_seed(self.name, self.version, budget))
        out: list[Example] = []
        for _ in range(MAX_DRAWS_PER_EXAMPLE * self.eval_n[budget]):
            if len(out) == self.eval_n[budget]:
                return out
            example = self.generate(rng, d, f"{self.name}-eval-{len(out)}")
            if example.prompt not in public:
                out.append(example)
        if len(out) < self.eval_n[budget]:
            raise RuntimeError(f"{self.name}: too few eval prompts differ from the dev prompts")
        return out

    def reference_job(self, budget: str) -> dict[str, str]:
        d = self.knobs(budget)
        env = render_template(
            self.templates,
            "reference_env.py.tmpl",
            system_prompt=repr(self.system_prompt_at(d)),
            max_turns=self.max_turns(d),
            **self.env_values(d),
        )
        full_budget = rollout_token_budget(self.max_turns(d), self.max_tokens, FULL_MAX_TOKENS)
        values = reference_job_values(budget, full_budget)
        job = render_template(self.templates, "reference_job.toml.tmpl", **values)
        return {"env.py": env, "job.toml": job}

    def baselines_path(self) -> Path:
        return baselines_file(self.name)
