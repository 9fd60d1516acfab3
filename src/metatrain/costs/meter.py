"""Per-call metering of one episode: every model call and compute job becomes a ledger line."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from metatrain.costs.budget import Budget, BudgetCheck, estimate_call_usd
from metatrain.costs.ledger import append_cost
from metatrain.protocols import PolicyTurn
from metatrain.specs import CostRecord, CostSummary


@attrs.define
class Meter:
    """Records costs into the run's and the global ledger and keeps the episode's CostSummary."""

    run_id: str
    ledgers: tuple[Path, ...]
    budget: Budget = attrs.Factory(Budget)
    summary: CostSummary = attrs.Factory(CostSummary)

    def __attrs_post_init__(self) -> None:
        self.summary.budget_usd = self.budget.episode_usd
        self.summary.global_budget_usd = self.budget.global_usd

    def precheck(
        self, policy: object, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> BudgetCheck:
        """Check the budgets against the worst case of the policy's next call; note a refusal."""
        check = self.budget.check(self.summary.total_usd, estimate_call_usd(policy, messages, tools))
        if not check.ok:
            self.summary.budget_exhausted = True
            self.summary.stop = "budget_exhausted"
            self.summary.notes.append(check.note)
        return check

    def agent_call(self, turn: PolicyTurn, model: str, note: str = "") -> None:
        """One model call: tokens and USD into the summary and both ledgers."""
        s = self.summary
        s.calls += 1
        s.tokens_in += turn.tokens_in
        s.tokens_out += turn.tokens_out
        s.usd += turn.usd
        s.total_usd = s.usd + s.compute_usd
        if note and note not in s.notes:
            s.notes.append(note)
        self._append("agent", turn.model or model, turn.tokens_in, turn.tokens_out, turn.usd, note)

    def compute(self, what: str, seconds: float, price_per_hour: float) -> None:
        """One compute job: ``price_per_hour × seconds``."""
        usd = max(0.0, price_per_hour) * max(0.0, seconds) / 3600.0
        s = self.summary
        s.compute_seconds += seconds
        s.compute_usd += usd
        s.total_usd = s.usd + s.compute_usd
        self._append("compute", what, 0, 0, usd, f"{seconds:.1f} s at ${price_per_hour:.4f}/h")

    def _append(self, kind: str, model: str, tokens_in: int, tokens_out: int, usd: float, note: str) -> None:
        record = CostRecord(
            ts=datetime.now().astimezone(),
            run_id=self.run_id,
            kind=kind,  # type: ignore[arg-type]
            model=model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            usd=usd,
            note=note,
        )
        for ledger in self.ledgers:
            append_cost(ledger, record)
