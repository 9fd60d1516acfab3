"""Model prices (USD per 1M tokens): built-in defaults, extended by the file named in METATRAIN_PRICES.

A prices file is TOML or JSON (by suffix): a table keyed by model name, each entry with
``input`` and ``output`` in USD per 1M tokens::

    ["openai/gpt-4o-mini"]
    input = 0.15
    output = 0.60

Entries in the file override the built-in ones. Keys starting with ``_`` are ignored.
"""

from __future__ import annotations

import json
import os
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import attrs

PRICES_ENV = "METATRAIN_PRICES"


@attrs.frozen
class Price:
    """USD per 1M input and output tokens."""

    input: float = attrs.field(validator=attrs.validators.ge(0.0))
    output: float = attrs.field(validator=attrs.validators.ge(0.0))

    def usd(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input + tokens_out * self.output) / 1e6


def _entries(raw: dict[str, Any], origin: str) -> dict[str, Price]:
    out: dict[str, Price] = {}
    for model, entry in raw.items():
        if model.startswith("_"):
            continue
        try:
            out[model] = Price(float(entry["input"]), float(entry["output"]))
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(
                f"{origin}: bad price entry for {model!r} (need input and output): {exc}"
            ) from exc
    return out


def load_price_file(path: Path) -> dict[str, Price]:
    """Read one prices file (TOML if it ends in .toml, else JSON)."""
    text = path.read_text(encoding="utf-8")
    raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a prices file is a table keyed by model name")
    return _entries(raw, str(path))


def builtin_prices() -> dict[str, Price]:
    text = files("metatrain.costs").joinpath("prices.json").read_text(encoding="utf-8")
    return _entries(json.loads(text), "built-in prices")


@attrs.frozen
class PriceTable:
    """Model name -> Price."""

    prices: dict[str, Price] = attrs.Factory(dict)

    def lookup(self, *models: str) -> Price | None:
        """The first model name with a price (exact match, then without an OpenRouter ``:variant``)."""
        for model in models:
            if not model:
                continue
            for key in (model, model.split(":")[0]):
                if key in self.prices:
                    return self.prices[key]
        return None


def load_prices(env: dict[str, str] | None = None) -> PriceTable:
    """Built-in prices, overridden by the file in ``$METATRAIN_PRICES`` when set."""
    prices = builtin_prices()
    path = (os.environ if env is None else env).get(PRICES_ENV)
    if path:
        prices.update(load_price_file(Path(path)))
    return PriceTable(prices)
