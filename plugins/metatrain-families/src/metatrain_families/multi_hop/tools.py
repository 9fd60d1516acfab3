"""multi_hop's eval tools. Each reads the example's persona world; ``world`` is hidden from the model."""

from __future__ import annotations

import json
from typing import Any


def _person(world: dict[str, Any], name: str) -> dict[str, Any]:
    key = str(name).strip().casefold()
    for person in world["people"]:
        if person["name"].casefold() == key:
            return dict(person)
    known = ", ".join(p["name"] for p in world["people"])
    raise ValueError(f"no person named {name!r}; the people in this world are: {known}")


def lookup_person(world: dict[str, Any], name: str) -> str:
    """Look up a person's profile: age and job.

    Args:
        name: The person's name (case-insensitive).

    Returns:
        A JSON object with the person's name, age and job.
    """
    p = _person(world, name)
    return json.dumps({"age": p["age"], "job": p["job"], "name": p["name"]}, sort_keys=True)


def get_manager(world: dict[str, Any], name: str) -> str:
    """Find out who a person's manager is.

    Args:
        name: The person's name (case-insensitive).

    Returns:
        The name of that person's manager.
    """
    return str(_person(world, name)["manager"])


def get_best_friend(world: dict[str, Any], name: str) -> str:
    """Find out who a person's best friend is.

    Args:
        name: The person's name (case-insensitive).

    Returns:
        The name of that person's best friend.
    """
    return str(_person(world, name)["best_friend"])


def get_city(world: dict[str, Any], name: str) -> str:
    """Find out which city a person lives in.

    Args:
        name: The person's name (case-insensitive).

    Returns:
        The city where that person lives.
    """
    return str(_person(world, name)["city"])


TOOLS = (lookup_person, get_manager, get_best_friend, get_city)
