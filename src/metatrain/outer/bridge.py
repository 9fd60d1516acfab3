"""The control-inversion bridge: an episode's agent turns become a tinker-cookbook ``Env``.

The episode loop (:func:`metatrain.episode.loop.run_episode`) calls ``policy.next_turn`` and blocks;
the cookbook's rollout loop calls ``env.step(action)`` and awaits. The bridge runs each episode in its
own daemon thread behind a :class:`BridgePolicy` whose ``next_turn`` posts the conversation to the
env's asyncio queue and blocks on a future the env resolves with the decoded sampled tokens.

``EpisodeEnv`` contract (one env = one episode, single use):

* ``initial_observation`` starts the episode thread and returns the first prompt's tokens.
* ``step(action)`` hands the decoded turn to the waiting episode, then awaits (without blocking the
  event loop) the next prompt or the episode's end: reward 0 and the extended observation while the
  episode goes on; the episode's total reward, its components as metrics, and ``episode_done`` at
  the end. Minutes-long inner jobs happen in the thread while other envs sample and train.
* A wait longer than ``turn_timeout_s`` (a hung episode) or an episode that raises is scored by
  :func:`fallback_reward` (the reward scheme's value for what was observed), logged, never dropped.
* Cancelling a step (or ``cancel()``) makes the episode's pending and later ``next_turn`` calls raise
  :class:`EpisodeCancelled`, which ends the episode thread at its next turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import tinker
from tinker_cookbook.rl.types import (
    STOP_METRIC_PREFIX,
    Env,
    InitialObservationOverflow,
    StepResult,
    StopReason,
)

from metatrain.outer.metrics import episode_metrics
from metatrain.outer.prompts import PrefixError, PromptCodec
from metatrain.protocols import Policy, PolicyTurn, ProgressFn, RewardInputs, RewardScheme
from metatrain.specs import EpisodeResult, RewardBreakdown

logger = logging.getLogger(__name__)

EpisodeFn = Callable[[Policy, ProgressFn], EpisodeResult]
"""Runs one whole episode with the given policy (in the episode thread) and returns its result."""


class EpisodeCancelled(Exception):
    """The outer loop gave up on this episode; raised inside the episode thread."""


@attrs.frozen
class _Prompt:
    """The episode asks for its next turn."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: concurrent.futures.Future[PolicyTurn]


@attrs.frozen
class _Ended:
    """The episode thread finished: a result, or the error that ended it."""

    result: EpisodeResult | None = None
    error: str | None = None


@attrs.define
class Observed:
    """What the bridge saw of an episode through its progress events (for scoring crashes)."""

    attempts: int = 0
    valid: bool = False
    events: int = 0

    def update(self, event: str, data: dict[str, Any]) -> None:
        self.events += 1
        if event == "validation":
            self.attempts = max(self.attempts, int(data.get("attempt", 0)))
            self.valid = self.valid or bool(data.get("ok"))


def fallback_reward(scheme: RewardScheme, observed: Observed, budget: str) -> RewardBreakdown:
    """The scheme's reward for an episode that crashed or hung.

    Before a valid submission: scored as an episode with no parseable submission (the scheme's error
    value, -0.1 by default). After one: scored as a valid job that died (validation credit only).
    """
    return scheme.compute(
        RewardInputs(
            any_parseable=observed.valid,
            attempts=observed.attempts,
            valid=observed.valid,
            job_status="died" if observed.valid else None,
            post=None,
            best_pre=None,
            train_seconds=0.0,
            budget=budget,
        )
    )


class BridgePolicy:
    """The queue-backed policy an episode thread talks to (satisfies ``Policy``)."""

    name = "outer-bridge"

    def __init__(self, post: Callable[[_Prompt], None]) -> None:
        self._post = post
        self._lock = threading.Lock()
        self._cancelled = False
        self._pending: concurrent.futures.Future[PolicyTurn] | None = None

    def next_turn(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyTurn:
        reply: concurrent.futures.Future[PolicyTurn] = concurrent.futures.Future()
        with self._lock:
            if self._cancelled:
                raise EpisodeCancelled("the outer loop cancelled this episode")
            self._pending = reply
        self._post(_Prompt([dict(m) for m in messages], [dict(t) for t in tools], reply))
        return reply.result()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            pending = self._pending
        if pending is not None and not pending.done():
            pending.set_exception(EpisodeCancelled("the outer loop cancelled this episode"))


@attrs.define
class EpisodeOutcome:
    """How an episode ended, as the env reports it (also what the episode log persists)."""

    key: str
    reward: RewardBreakdown
    metrics: dict[str, float]
    result: EpisodeResult | None = None
    error: str | None = None
    hung: bool = False
    cancelled: bool = False
    turns: int = 0


class EpisodeEnv(Env):
    """One episode as a cookbook ``Env`` (see the module docstring for the contract)."""

    def __init__(
        self,
        key: str,
        episode_fn: EpisodeFn,
        codec: PromptCodec,
        scheme: RewardScheme,
        budget: str = "fast",
        turn_timeout_s: float = 3600.0,
        on_end: Callable[[EpisodeOutcome], None] | None = None,
        models: Sequence[str] = (),
    ) -> None:
        self.key = key
        self.episode_fn = episode_fn
        self.codec = codec
        self.scheme = scheme
        self.budget = budget
        self.turn_timeout_s = turn_timeout_s
        self.on_end = on_end
        self.models = tuple(models)
        self.observed = Observed()
        self.outcome: EpisodeOutcome | None = None
        self.turns = 0
        self.malformed = 0
        self._events: asyncio.Queue[_Prompt | _Ended] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._policy: BridgePolicy | None = None
        self._thread: threading.Thread | None = None
        self._pending: _Prompt | None = None
        self._ob: list[int] = []

    # -- the episode thread ------------------------------------------------------------------

    def _post(self, event: _Prompt | _Ended) -> None:
        loop, events = self._loop, self._events
        assert loop is not None and events is not None
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # the event loop is gone: nobody is waiting any more
            if isinstance(event, _Prompt):
                event.reply.set_exception(EpisodeCancelled("the outer loop has shut down"))

    def _run(self) -> None:
        assert self._policy is not None
        try:
            result = self.episode_fn(self._policy, self.observed.update)
        except EpisodeCancelled:
            self._post(_Ended(error="cancelled"))
        except BaseException as exc:
            logger.exception("episode %s crashed", self.key)
            self._post(_Ended(error=f"{type(exc).__name__}: {exc}"))
        else:
            self._post(_Ended(result=result))

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self._policy = BridgePolicy(self._post)
        self._thread = threading.Thread(target=self._run, name=f"episode-{self.key}", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Stop waiting for this episode; its thread ends at its next turn."""
        if self._policy is not None:
            self._policy.cancel()

    def last_observation(self) -> list[int]:
        """The latest prompt tokens, or a minimal rendered prompt if the episode never asked for one."""
        return list(self._ob) or self.codec.first_prompt([{"role": "user", "content": ""}], [])

    def abandon(self, error: str) -> EpisodeOutcome:
        """End the episode from outside (its rollout failed): cancel it and score it as a crash."""
        self.cancel()
        return self.outcome if self.outcome is not None else self._finish(_Ended(error=error))

    async def _next_event(self) -> _Prompt | _Ended | None:
        """The episode's next prompt or its end; None when it took longer than the turn timeout."""
        assert self._events is not None
        try:
            return await asyncio.wait_for(self._events.get(), self.turn_timeout_s)
        except TimeoutError:
            return None
        except asyncio.CancelledError:
            self.cancel()
            raise

    # -- the cookbook side -------------------------------------------------------------------

    async def initial_observation(self) -> tuple[tinker.ModelInput, Any] | InitialObservationOverflow:
        self._start()
        event = await self._next_event()
        if isinstance(event, _Prompt):
            self._pending = event
            self._ob = self.codec.first_prompt(event.messages, event.tools)
            return tinker.ModelInput.from_ints(self._ob), self.codec.stop_condition()
        outcome = self._finish(event)
        return InitialObservationOverflow(reward=outcome.reward.total, metrics=outcome.metrics)

    async def step(self, action: list[int], *, extra: Any = None) -> StepResult:
        pending = self._pending
        if pending is None:
            raise RuntimeError(f"episode {self.key}: step() without a pending prompt (single-use env)")
        self._pending = None
        self.turns += 1
        decoded = self.codec.decode(action, f"{self.key}-{self.turns}")
        self.malformed += decoded.malformed
        turn = attrs.evolve(decoded.turn, tokens_in=len(self._ob))
        if not pending.reply.done():
            pending.reply.set_result(turn)
        event = await self._next_event()
        if isinstance(event, _Prompt):
            history, new = _split_new(pending.messages, event.messages, self.key)
            tail = self.codec.continuation(history, new, action, event.tools)
            self._ob = [*self._ob, *action, *tail]
            self._pending = event
            return StepResult(
                reward=0.0,
                episode_done=False,
                next_observation=tinker.ModelInput.from_ints(self._ob),
                next_stop_condition=self.codec.stop_condition(),
            )
        outcome = self._finish(event)
        return StepResult(
            reward=outcome.reward.total,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.codec.stop_condition(),
            metrics=outcome.metrics,
            logs={"episode": self.key, "outcome": outcome.reward.outcome, "error": outcome.error or ""},
        )

    def _finish(self, event: _Ended | None) -> EpisodeOutcome:
        """Score the end of the episode (result, crash or hang), record and report it."""
        hung = event is None
        if hung:
            self.cancel()
            logger.warning("episode %s hung (no turn or end within %.0f s)", self.key, self.turn_timeout_s)
        result = event.result if event is not None else None
        error = "hung" if hung else (event.error if event is not None else None)
        reward = (
            result.reward if result is not None else fallback_reward(self.scheme, self.observed, self.budget)
        )
        metrics = episode_metrics(result, reward, self.models)
        metrics.update(
            {
                "episode/crashed": float(error is not None and not hung and error != "cancelled"),
                "episode/hung": float(hung),
                "episode/malformed_tool_calls": float(self.malformed),
                f"{STOP_METRIC_PREFIX}{StopReason.ROLLOUT_TIMEOUT if hung else StopReason.COMPLETED}": 1.0,
            }
        )
        outcome = EpisodeOutcome(
            self.key,
            reward,
            metrics,
            result,
            error,
            hung=hung,
            cancelled=error == "cancelled",
            turns=self.turns,
        )
        self.outcome = outcome
        if self.on_end is not None:
            self.on_end(outcome)
        return outcome


def _split_new(
    before: list[dict[str, Any]], now: list[dict[str, Any]], key: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(history through the agent's assistant message, the messages added after it)."""
    n = len(before)
    if len(now) <= n or now[:n] != before or now[n].get("role") != "assistant":
        raise PrefixError(f"episode {key}: the conversation was rewritten between turns")
    new = now[n + 1 :]
    if any(m.get("role") == "assistant" for m in new):
        raise PrefixError(f"episode {key}: an assistant message the agent did not sample was injected")
    return now[: n + 1], new
