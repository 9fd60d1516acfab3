"""Summaries of a cost ledger: per run, per model, per day (as rows and as rich tables)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs
from rich.table import Table

from metatrain.specs import CostRecord


@attrs.define
class CostRow:
    """Totals of the records that share one key."""

    key: str
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    agent_usd: float = 0.0
    compute_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return self.agent_usd + self.compute_usd

    def add(self, r: CostRecord) -> None:
        self.calls += 1
        self.tokens_in += r.tokens_in
        self.tokens_out += r.tokens_out
        if r.kind == "agent":
            self.agent_usd += r.usd
        else:
            self.compute_usd += r.usd


def summarise(records: Iterable[CostRecord], key: Callable[[CostRecord], str]) -> list[CostRow]:
    """One row per distinct ``key(record)``, in key order."""
    rows: dict[str, CostRow] = {}
    for r in records:
        k = key(r)
        rows.setdefault(k, CostRow(k)).add(r)
    return [rows[k] for k in sorted(rows)]


def by_run(r: CostRecord) -> str:
    return r.run_id


def by_model(r: CostRecord) -> str:
    return f"{r.kind}: {r.model}"


def by_day(r: CostRecord) -> str:
    """The record's local calendar day."""
    return r.ts.date().isoformat()


def cost_table(title: str, key_name: str, rows: list[CostRow]) -> Table:
    """A rich table of rows with a total line."""
    table = Table(key_name, "records", "tokens in", "tokens out", "agent USD", "compute USD", "total USD")
    table.title = title
    total = CostRow("total")
    for row in rows:
        table.add_row(*_cells(row))
        total.calls += row.calls
        total.tokens_in += row.tokens_in
        total.tokens_out += row.tokens_out
        total.agent_usd += row.agent_usd
        total.compute_usd += row.compute_usd
    table.add_section()
    table.add_row(*_cells(total), style="bold")
    return table


def _cells(row: CostRow) -> list[str]:
    return [
        row.key,
        str(row.calls),
        f"{row.tokens_in:,}",
        f"{row.tokens_out:,}",
        f"${row.agent_usd:.4f}",
        f"${row.compute_usd:.4f}",
        f"${row.total_usd:.4f}",
    ]
