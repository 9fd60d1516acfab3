"""dispatch's eval tools. Each reads the example's support-desk world; ``world`` is hidden from the model.

At the two-table levels a wrong team or lane is answered with the valid names (not with any code):
whatever names a policy tries, it answers one code, and ignoring the tables that is right 1 time in 24
(five rules).

A world with ``customer_ids`` false (an easier calibration level: its tickets carry no customer id) is
queried through ``get_ticket_without_customer``: same tool name, a docstring without the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from metatrain_families.common import named_as


def _find(world: dict[str, Any], table: str, key: str, value: str, what: str) -> str:
    wanted = str(value).strip().casefold()
    for record in world[table]:
        if str(record[key]).casefold() == wanted:
            return json.dumps(record, sort_keys=True)
    known = ", ".join(str(r[key]) for r in world[table])
    raise ValueError(f"no {what} {value!r}; known {what}s: {known}")


def get_ticket(world: dict[str, Any], ticket_id: str) -> str:
    """Fetch a support ticket.

    Args:
        ticket_id: The ticket's id, e.g. T-1234.

    Returns:
        A JSON object with the ticket's id, customer_id, category, severity (1-4) and channel.
    """
    return _find(world, "tickets", "id", ticket_id, "ticket id")


def get_customer(world: dict[str, Any], customer_id: str) -> str:
    """Fetch a customer's account.

    Args:
        customer_id: The customer's id, e.g. C-123.

    Returns:
        A JSON object with the customer's id, tier and region.
    """
    return _find(world, "customers", "id", customer_id, "customer id")


def get_sla(world: dict[str, Any], tier: str) -> str:
    """Fetch the service-level agreement of a customer tier.

    Args:
        tier: The tier name: bronze, silver, gold or platinum.

    Returns:
        A JSON object with the tier and its response_hours.
    """
    return _find(world, "slas", "tier", tier, "tier")


def get_ticket_without_customer(world: dict[str, Any], ticket_id: str) -> str:
    """Fetch a support ticket.

    Args:
        ticket_id: The ticket's id, e.g. T-1234.

    Returns:
        A JSON object with the ticket's id, category, severity (1-4) and channel.
    """
    return _find(world, "tickets", "id", ticket_id, "ticket id")


named_as(get_ticket_without_customer, "get_ticket")


def get_ticket_for_tables(world: dict[str, Any], ticket_id: str) -> str:
    """Fetch a support ticket.

    Args:
        ticket_id: The ticket's id, e.g. T-1234.

    Returns:
        A JSON object with the ticket's id, category and channel.
    """
    return _find(world, "tickets", "id", ticket_id, "ticket id")


named_as(get_ticket_for_tables, "get_ticket")


def get_queue_code(world: dict[str, Any], team: str, lane: str) -> str:
    """Fetch the code of a team's queue in one lane.

    Args:
        team: The team's name, from the team table.
        lane: The lane's name, from the lane table.

    Returns:
        The queue code: Q- and four digits.
    """
    key = f"{str(team).strip().casefold()}/{str(lane).strip().casefold()}"
    if key in world["codes"]:
        return str(world["codes"][key])
    teams = sorted({k.split("/")[0] for k in world["codes"]})
    lanes = sorted({k.split("/")[1] for k in world["codes"]})
    raise ValueError(
        f"no queue {key!r}: teams are {', '.join(teams)}; lanes are {', '.join(lanes)}. "
        "Take them from the tables in the request."
    )


TOOLS = (get_ticket, get_customer, get_sla)
TABLE_TOOLS = (get_ticket_for_tables, get_queue_code)
"""The eval tools at the two-table levels (``Difficulty.two_tables``)."""


def tools_for(
    customer_ids: bool = True, lean: bool = False, tables: bool = False
) -> tuple[Callable[..., Any], ...]:
    """The eval tools for a level's ``Difficulty.customer_ids``, ``lean_tools`` (``get_ticket`` alone)
    and ``two_tables``."""
    if tables:
        return TABLE_TOOLS
    if lean:
        return (get_ticket_without_customer,)
    return (get_ticket if customer_ids else get_ticket_without_customer, get_customer, get_sla)
