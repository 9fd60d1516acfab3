"""The extension protocols. Plugins provide objects satisfying these; the core never subclasses them.

Contracts:
- ``TaskFamily`` objects are stateless and cheap to construct; every method may be called many
  times and from several processes. ``hidden_eval`` is called only by the runner's eval phase, in
  a process that runs no agent-written code.
- ``LeveledFamily`` (optional for a task family) offers candidate difficulty levels to
  ``metatrain calibrate``; each level is a family drawing at other knobs, never a new version.
- ``ComputeProvider`` turns a job bundle directory into a ``JobResult``; ``submit`` is idempotent
  per job id.
- ``RewardScheme.compute`` is a pure function of its inputs.
- ``Policy.next_turn`` is called once per agent turn with the whole conversation so far; it may
  block (network, generation) and must not mutate ``messages``.
- ``OuterTrainer.train`` runs the outer RL loop until done; it owns its process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from metatrain.specs import Example, JobResult, RewardBreakdown, TaskSpec

ProgressFn = Callable[[str, dict[str, Any]], None]
"""``progress(event, data)``: phase events from long-running work (``phase``, ``step``, ``log``)."""


@runtime_checkable
class TaskFamily(Protocol):
    """A generator of tasks with tools, a hidden eval and a scorer."""

    name: str
    version: str
    held_out: bool

    def task_spec(self, budget: str) -> TaskSpec:
        """What the agent sees for this budget (``fast`` or ``full``)."""
        ...

    def tools_for(self, example: Example) -> list[Callable[..., Any]]:
        """The eval tools bound to one example's world (schemas = ``task_spec().eval.tools``)."""
        ...

    def hidden_eval(self, budget: str) -> list[Example]:
        """The hidden eval set, generated from the secret seed."""
        ...

    def score(self, example: Example, final_text: str) -> float:
        """Score the model's final assistant text against the example, in [0, 1]."""
        ...

    def reference_job(self, budget: str) -> dict[str, str]:
        """Workspace files (path -> text) of this family's reference job."""
        ...

    def baselines_path(self) -> Path:
        """Where this family's frozen baselines file lives."""
        ...


@runtime_checkable
class LeveledFamily(Protocol):
    """A task family with candidate difficulty levels for ``metatrain calibrate`` (optional)."""

    def calibration_levels(self, budget: str) -> Mapping[str, TaskFamily]:
        """The family at each candidate level, hardest first: label -> a family drawing at it."""
        ...


@runtime_checkable
class ComputeProvider(Protocol):
    """Runs job bundles somewhere (this machine, a GPU fleet)."""

    name: str

    def configure(self, **options: Any) -> ComputeProvider:
        """A copy of this provider with options set (``device``, ``queue_root``, ...)."""
        ...

    def submit(self, bundle_dir: Path, job_id: str) -> str:
        """Queue a bundle under ``job_id``; idempotent per job id."""
        ...

    def wait(self, job_id: str, progress: ProgressFn | None = None) -> JobResult:
        """Block until the job has a result, driving the work where the provider is local."""
        ...


@attrs.frozen
class RewardInputs:
    """What a reward scheme sees about one episode."""

    any_parseable: bool
    attempts: int
    valid: bool
    job_status: str | None
    post: float | None
    best_pre: float | None
    train_seconds: float
    budget: str


@runtime_checkable
class RewardScheme(Protocol):
    name: str

    def compute(self, inputs: RewardInputs) -> RewardBreakdown: ...


@attrs.frozen
class ToolCall:
    """One tool call an agent made; ``arguments`` is the raw JSON text it produced."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class PolicyTurn:
    """One assistant turn: text, tool calls, and what it cost."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    model: str = ""


@runtime_checkable
class Policy(Protocol):
    """An agent: maps the conversation so far to its next turn."""

    name: str

    def next_turn(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> PolicyTurn: ...


@attrs.frozen
class PolicyContext:
    """What a policy factory may use to build a policy for one episode."""

    family: TaskFamily
    spec: TaskSpec
    budget: str
    seed: int = 0


@runtime_checkable
class PolicyFactory(Protocol):
    """Registered through ``register_policies``: builds a policy from ``--agent NAME[:ARG]``."""

    name: str
    description: str

    def create(self, arg: str | None, context: PolicyContext) -> Policy: ...


@runtime_checkable
class OuterTrainer(Protocol):
    """Trains the agent itself on episode rewards."""

    name: str

    def train(self, config: dict[str, Any]) -> None: ...
