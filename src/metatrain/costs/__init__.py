"""Cost records, the append-only ledger, model prices, budgets and ledger summaries."""

from metatrain.costs.budget import Budget, BudgetCheck, CostEstimator, estimate_call_usd, ledger_total
from metatrain.costs.ledger import append_cost, read_costs
from metatrain.costs.prices import PRICES_ENV, Price, PriceTable, load_price_file, load_prices

__all__ = [
    "PRICES_ENV",
    "Budget",
    "BudgetCheck",
    "CostEstimator",
    "Price",
    "PriceTable",
    "append_cost",
    "estimate_call_usd",
    "ledger_total",
    "load_price_file",
    "load_prices",
    "read_costs",
]
