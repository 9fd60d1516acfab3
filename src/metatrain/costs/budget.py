"""Budgets (USD) checked before every model call against a worst-case estimate of that call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from metatrain.costs.ledger import read_costs


@runtime_checkable
class CostEstimator(Protocol):
    """A policy that can bound the cost of its next call (``usd`` of prompt estimate + max output)."""

    def estimate_usd(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> float: ...


def estimate_call_usd(
    policy: object, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> float:
    """Worst-case USD of the policy's next call; 0 for policies that cost nothing or cannot say."""
    if isinstance(policy, CostEstimator):
        return max(0.0, float(policy.estimate_usd(messages, tools)))
    return 0.0


def ledger_total(path: Path) -> float:
    """Total USD recorded in a ledger (0 if it does not exist)."""
    return sum(r.usd for r in read_costs(path))


@attrs.frozen
class BudgetCheck:
    """Why a call may not be made (``ok`` False), in words for the trajectory and result."""

    ok: bool
    scope: str = ""
    note: str = ""


@attrs.frozen
class Budget:
    """Episode and global limits; ``None`` means unlimited."""

    episode_usd: float | None = None
    global_usd: float | None = None
    ledger: Path | None = None

    def check(self, spent_episode: float, estimate: float) -> BudgetCheck:
        """May a call costing up to ``estimate`` be made, given what this episode already spent?"""
        if self.episode_usd is not None and spent_episode + estimate > self.episode_usd:
            left = self.episode_usd - spent_episode
            return BudgetCheck(
                False,
                "episode",
                f"episode budget ${self.episode_usd:.4f}: next call could cost ${estimate:.4f}, "
                f"${left:.4f} left",
            )
        if self.global_usd is not None:
            spent = ledger_total(self.ledger) if self.ledger is not None else spent_episode
            if spent + estimate > self.global_usd:
                return BudgetCheck(
                    False,
                    "global",
                    f"global budget ${self.global_usd:.4f}: ${spent:.4f} spent in the ledger, "
                    f"next call could cost ${estimate:.4f}",
                )
        return BudgetCheck(True)
