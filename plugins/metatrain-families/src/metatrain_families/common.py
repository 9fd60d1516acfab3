"""Pieces every built-in family shares: answer parsing, template loading, baselines location."""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path

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
