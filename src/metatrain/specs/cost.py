"""Cost records: one line of a ``costs.jsonl`` ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class CostRecord(BaseModel):
    """Tokens and dollars spent by one model call or one compute job."""

    ts: datetime
    run_id: str
    kind: Literal["agent", "compute"]
    model: str
    tokens_in: int = Field(0, ge=0)
    tokens_out: int = Field(0, ge=0)
    usd: float = Field(0.0, ge=0.0)
    note: str = ""
