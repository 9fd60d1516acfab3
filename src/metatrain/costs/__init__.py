"""Cost records and the append-only ledger."""

from metatrain.costs.ledger import append_cost, read_costs

__all__ = ["append_cost", "read_costs"]
