"""triage's eval tools: read-only views of one example's ``world`` (hidden from the model).

The world holds lists of records (Arrow-safe): ``services`` ({name, team, depends_on}),
``incidents`` ({id, service, started, status, summary}) and ``deploys`` ({id, service, at, team,
change, rolled_back}); times are ``"HH:MM"`` on one day. Names and ids are matched case-insensitively.
A world with ``lookup == "until"`` (an easier calibration level) is queried through
``list_deploys_until`` instead of ``list_deploys``: same tool name, the window before a time; one with
``incident_ids`` false through ``list_incidents_without_ids`` (same name, no ``id`` field); one with
``shipper == "others"`` through ``get_deploy_shipped_by_others`` (same record; its docstring says whose
team it is).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from metatrain_families.common import named_as


def minutes(text: Any) -> int:
    """``"HH:MM"`` -> minutes since midnight; ValueError with a hint otherwise."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", str(text))
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ValueError(f"times look like '14:05' (24-hour HH:MM), got {text!r}")
    return int(m.group(1)) * 60 + int(m.group(2))


def _service(world: dict[str, Any], name: Any) -> dict[str, Any]:
    key = str(name).strip().lower()
    for record in world["services"]:
        if record["name"] == key:
            return record
    known = ", ".join(sorted(r["name"] for r in world["services"]))
    raise ValueError(f"no service named {key!r}; services: {known}")


def list_incidents(world: dict[str, Any], service: str) -> list[dict[str, Any]]:
    """List the incidents recorded on a service, oldest first.

    Args:
        service: The service name.

    Returns:
        One entry per incident: id, started (HH:MM), status (open or resolved) and summary.
    """
    name = _service(world, service)["name"]
    found = [i for i in world["incidents"] if i["service"] == name]
    return [
        {"id": i["id"], "started": i["started"], "status": i["status"], "summary": i["summary"]}
        for i in sorted(found, key=lambda i: minutes(i["started"]))
    ]


def list_incidents_without_ids(world: dict[str, Any], service: str) -> list[dict[str, Any]]:
    """List the incidents recorded on a service, oldest first.

    Args:
        service: The service name.

    Returns:
        One entry per incident: started (HH:MM), status (open or resolved) and summary.
    """
    return [{k: v for k, v in i.items() if k != "id"} for i in list_incidents(world, service)]


def get_service(world: dict[str, Any], name: str) -> dict[str, Any]:
    """Describe a service: the team that owns it and the services it directly depends on.

    Args:
        name: The service name.

    Returns:
        name, team and depends_on (a list of service names).
    """
    record = _service(world, name)
    return {"name": record["name"], "team": record["team"], "depends_on": list(record["depends_on"])}


def list_deploys(world: dict[str, Any], service: str, since: str) -> list[dict[str, Any]]:
    """List the deploys made to a service at or after a time, oldest first.

    Args:
        service: The service name.
        since: The earliest deploy time to include, as HH:MM (24-hour; "00:00" lists the whole day).

    Returns:
        One entry per deploy: id and at (HH:MM).
    """
    name = _service(world, service)["name"]
    start = minutes(since)
    found = [d for d in world["deploys"] if d["service"] == name and minutes(d["at"]) >= start]
    return [{"id": d["id"], "at": d["at"]} for d in sorted(found, key=lambda d: minutes(d["at"]))]


def list_deploys_until(world: dict[str, Any], service: str, until: str) -> list[dict[str, Any]]:
    """List the deploys made to a service at or before a time, most recent first.

    Args:
        service: The service name.
        until: The latest deploy time to include, as HH:MM (24-hour), e.g. when an incident started.

    Returns:
        One entry per deploy: id and at (HH:MM).
    """
    name = _service(world, service)["name"]
    end = minutes(until)
    found = [d for d in world["deploys"] if d["service"] == name and minutes(d["at"]) <= end]
    return [{"id": d["id"], "at": d["at"]} for d in sorted(found, key=lambda d: -minutes(d["at"]))]


named_as(list_deploys_until, "list_deploys")
named_as(list_incidents_without_ids, "list_incidents")
"""A level swaps a window or drops a field, not a tool's name."""


def get_deploy(world: dict[str, Any], deploy_id: str) -> dict[str, Any]:
    """Show one deploy in full.

    Args:
        deploy_id: The deploy id, e.g. dep-1a2b.

    Returns:
        id, service, at (HH:MM), team (the service's owner), change, and rolled_back (true or false).
    """
    key = str(deploy_id).strip().lower()
    for record in world["deploys"]:
        if record["id"] == key:
            return dict(record)
    window = "until" if world.get("lookup") == "until" else "since"
    raise ValueError(f"no deploy with id {key!r}; list_deploys(service, {window}) lists a service's deploys")


def get_deploy_shipped_by_others(world: dict[str, Any], deploy_id: str) -> dict[str, Any]:
    """Show one deploy in full.

    Args:
        deploy_id: The deploy id, e.g. dep-1a2b.

    Returns:
        id, service, at (HH:MM), team (the team that shipped it), change, and rolled_back (true or false).
    """
    return get_deploy(world, deploy_id)


named_as(get_deploy_shipped_by_others, "get_deploy")

TOOLS = (list_incidents, get_service, list_deploys, get_deploy)


def tools_for(
    lookup: str = "since", incident_ids: bool = True, shipper: str = "owner", lean: bool = False
) -> tuple[Callable[..., Any], ...]:
    """The eval tools for a level's ``Difficulty.lookup``, ``incident_ids``, ``shipper`` and
    ``lean_tools`` (only the incident and deploy lists)."""
    incidents = list_incidents if incident_ids else list_incidents_without_ids
    deploys = list_deploys_until if lookup == "until" else list_deploys
    if lean:
        return (incidents, deploys)
    deploy = get_deploy if shipper == "owner" else get_deploy_shipped_by_others
    return (incidents, get_service, deploys, deploy)
