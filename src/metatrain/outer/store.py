"""Completed episodes survive a crash: an append-only episode log and per-episode trajectory files.

* ``LOG_DIR/episodes.jsonl``: one line per finished episode (key, reward and components, outcome,
  error, run directory), appended and fsynced as each episode ends.
* ``LOG_DIR/trajectories/<group key>/<i>.pkl``: the cookbook ``Trajectory`` of each finished episode
  (tokens, sampled logprobs, reward), written atomically by :class:`PersistingRollouts`.

``PersistingRollouts`` is a cookbook ``RolloutStrategy`` (the documented seam for how a group's
trajectories are collected; pass it as ``Config.rollout_error_tolerance``). After a restart, the
dataset re-issues the groups of the unfinished steps under the same keys; an episode whose trajectory
file exists is served from it once instead of being run again, so no finished inner job is lost. A
group that is requeued in the same process (stale under ``max_steps_off_policy``) runs afresh. A
rollout that raises is kept as a one-transition trajectory with the scheme's fallback reward (it
still counts in the group's mean, its datum is fully masked), never dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinker
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollout_strategy import RolloutResult, RolloutStrategy
from tinker_cookbook.rl.types import EnvGroupBuilder, Trajectory, Transition

from metatrain.outer.bridge import EpisodeEnv, EpisodeOutcome
from metatrain.outer.metrics import read_jsonl

logger = logging.getLogger(__name__)
_SERVED: set[str] = set()
_SERVED_LOCK = threading.Lock()


class EpisodeLog:
    """Appends one JSON line per finished episode to ``path`` (thread-safe, fsynced)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, outcome: EpisodeOutcome) -> None:
        record: dict[str, Any] = {
            "key": outcome.key,
            "reward": outcome.reward.model_dump(),
            "metrics": outcome.metrics,
            "error": outcome.error,
            "hung": outcome.hung,
            "cancelled": outcome.cancelled,
            "turns": outcome.turns,
            "run_dir": outcome.result.run_dir if outcome.result is not None else None,
            "model": outcome.result.model if outcome.result is not None else None,
        }
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())


def read_episode_log(path: Path) -> list[dict[str, Any]]:
    """The episode log's records (a torn last line from a kill is skipped)."""
    return read_jsonl(path)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _error_trajectory(prompt: list[int], reward: float, metrics: dict[str, float]) -> Trajectory:
    """A trajectory that carries a reward but no action: its datum has an all-zero loss mask."""
    transition = Transition(
        ob=tinker.ModelInput.from_ints(prompt),
        ac=TokensWithLogprobs([], []),
        reward=reward,
        episode_done=True,
        metrics=metrics,
    )
    return Trajectory(transitions=[transition], final_ob=tinker.ModelInput.empty())


def _without_tokens(traj: Trajectory) -> bool:
    return all(t.ob.length == 0 and not t.ac.tokens for t in traj.transitions)


@dataclass(frozen=True)
class PersistingRollouts(RolloutStrategy):
    """Runs a group's episodes concurrently, persisting each finished trajectory (see module doc)."""

    root: str

    def path(self, group_key: str, index: int) -> Path:
        return Path(self.root) / group_key / f"{index}.pkl"

    def _stored(self, path: Path) -> Trajectory | None:
        with _SERVED_LOCK:
            if str(path) in _SERVED or not path.is_file():
                return None
            _SERVED.add(str(path))
        try:
            traj = pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
            logger.warning("ignoring unreadable stored trajectory %s: %s", path, exc)
            return None
        logger.info("episode served from %s (finished before a restart)", path)
        return traj if isinstance(traj, Trajectory) else None

    async def _one(self, policy: TokenCompleter, env: Any, path: Path | None) -> Trajectory:
        from tinker_cookbook.rl.rollouts import do_single_rollout

        stored = self._stored(path) if path is not None else None
        if stored is not None:
            return stored
        try:
            traj = await do_single_rollout(policy, env)
        except asyncio.CancelledError:
            if isinstance(env, EpisodeEnv):
                env.cancel()
            raise
        except Exception as exc:
            if not isinstance(env, EpisodeEnv):
                raise
            logger.exception("rollout of episode %s failed; scored by the reward scheme", env.key)
            outcome = env.abandon(f"{type(exc).__name__}: {exc}")
            metrics = {**outcome.metrics, "episode/rollout_error": 1.0}
            traj = _error_trajectory(env.last_observation(), outcome.reward.total, metrics)
        if isinstance(env, EpisodeEnv) and _without_tokens(traj):
            # An episode that ended before its first prompt: keep its reward in the group, and give
            # the cookbook a (fully masked) datum so that a batch of such episodes cannot be empty.
            last = traj.transitions[-1]
            total = sum(t.reward for t in traj.transitions)
            traj = _error_trajectory(env.last_observation(), total, dict(last.metrics))
        if path is None:
            return traj
        with _SERVED_LOCK:
            _SERVED.add(str(path))
        _write_atomic(path, pickle.dumps(traj))
        return traj

    async def execute(self, env_group_builder: EnvGroupBuilder, policy: TokenCompleter) -> RolloutResult:
        envs = await env_group_builder.make_envs()
        key = str(getattr(env_group_builder, "key", "") or "")
        persist = bool(key) and bool(getattr(env_group_builder, "persist", True))
        trajectories = await asyncio.gather(
            *[self._one(policy, env, self.path(key, i) if persist else None) for i, env in enumerate(envs)]
        )
        return RolloutResult(trajectories=list(trajectories), envs=envs, errors=[])
