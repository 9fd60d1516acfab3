"""Pieces every built-in family shares: answer parsing, template loading, baselines location."""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

from metatrain.specs import ToolSchema

ANSWER_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` block, or None."""
    found = ANSWER_RE.findall(text)
    return found[-1].strip() if found else None


def normalise_int(text: str | None) -> int | None:
    """Parse an integer answer: surrounding spaces, a leading '+' and thousands commas are allowed."""
    if text is None:
        return None
    cleaned = text.strip().replace(",", "").replace("_", "")
    cleaned = cleaned.removeprefix("+")
    if re.fullmatch(r"-?\d+", cleaned):
        return int(cleaned)
    return None


def render_template(package: str, name: str, **values: object) -> str:
    """Fill a ``$name`` template shipped in ``package``."""
    text = resources.files(package).joinpath(name).read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def baselines_file(family: str) -> Path:
    return Path(str(resources.files("metatrain_families").joinpath("baselines", f"{family}.json")))


WORLD_ARG = "world"


def bind_world(fn: Callable[..., Any], world: Any) -> Callable[..., Any]:
    """``fn(world, **args)`` bound to one example's world.

    The result keeps ``fn``'s name and docstring and drops ``world`` from its signature, so its
    JSON schema is the tool the model sees. Stateless tools (no ``world`` parameter) come back as is.
    """
    sig = inspect.signature(fn)
    if WORLD_ARG not in sig.parameters:
        return fn

    def bound(**kwargs: Any) -> Any:
        return fn(world, **kwargs)

    bound.__name__ = fn.__name__
    bound.__doc__ = fn.__doc__
    bound.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for n, p in sig.parameters.items() if n != WORLD_ARG]
    )
    bound.__annotations__ = {k: v for k, v in get_type_hints(fn).items() if k != WORLD_ARG}
    return bound


def tool_schemas(tools: Iterable[Callable[..., Any]]) -> list[ToolSchema]:
    """The eval tool interface: each tool's JSON schema as the model sees it (``world`` hidden)."""
    from transformers.utils import get_json_schema

    return [ToolSchema.model_validate(get_json_schema(bind_world(fn, None))["function"]) for fn in tools]
