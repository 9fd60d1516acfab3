"""``metatrain fleet``: the GPU fleet's pods, jobs and spend (``status``); its simulator (``simulate``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from rich.console import Console
from rich.table import Table

from metatrain.cli.fleet_simulate import simulate

fleet_app = typer.Typer(help="The GPU fleet: pods, jobs and spend.", no_args_is_help=True)
console = Console()


class PodRow(Protocol):
    """What a pod provider's ``fleet_pods()`` returns per live pod."""

    id: str
    gpu: str
    status: str
    job_id: str | None
    cost_per_hr: float
    uptime_seconds: float
    jobs_done: int


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def pods_table(pods: list[PodRow]) -> Table:
    table = Table("pod", "gpu", "status", "job", "$/hr", "uptime", "jobs done", title="pods")
    for p in pods:
        table.add_row(
            p.id,
            p.gpu,
            p.status,
            p.job_id or "",
            f"${p.cost_per_hr:.2f}",
            _duration(p.uptime_seconds),
            str(p.jobs_done),
        )
    return table


def jobs_table(queue_root: Path, pods: list[PodRow]) -> Table:
    """Queue counts, then one row per running job (attempt, lease owner, pod)."""
    from metatrain.jobs.queue import FileQueue

    q = FileQueue(queue_root)
    done = Counter((r.status if (r := q.result(j)) else "?") for j in q.ids("done"))
    on_pod = {p.job_id: p.id for p in pods if p.job_id}
    table = Table("job", "state", "attempt", "worker", "pod", title=f"jobs ({queue_root})")
    for job_id in q.ids("running"):
        lease = q.lease(job_id)
        table.add_row(
            job_id,
            "running",
            str(lease.attempt) if lease else "?",
            lease.worker if lease else "",
            on_pod.get(job_id, ""),
        )
    summary = ", ".join(f"{n} {s}" for s, n in sorted(done.items())) or "none"
    table.caption = f"{len(q.ids('queued'))} queued · {len(q.ids('running'))} running · done: {summary}"
    return table


def spend_line(ledger: Path, provider: str, pods: list[PodRow]) -> str:
    from metatrain.costs import read_costs

    records = [r for r in read_costs(ledger) if r.kind == "compute" and r.model.startswith(f"{provider}:")]
    total = sum(r.usd for r in records)
    burn = sum(p.cost_per_hr for p in pods)
    return (
        f"spend: ${total:.4f} recorded for {provider} in {ledger} ({len(records)} records); "
        f"live pods burn ${burn:.2f}/h"
    )


@fleet_app.command()
def status(
    provider: Annotated[str, typer.Option(help="Pod provider")] = "runpod",
    queue: Annotated[Path, typer.Option(help="Queue directory")] = Path("runs/queue"),
    ledger: Annotated[Path | None, typer.Option(help="Cost ledger (default: QUEUE/../costs.jsonl)")] = None,
) -> None:
    """Show the pool's pods (id, gpu, status, job, $/hr, uptime), the queue's jobs and compute spend."""
    from metatrain.plugins import PluginError, load_plugins

    try:
        prov: Any = load_plugins().compute_provider(provider).configure(queue_root=queue)
    except PluginError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    fleet_pods = getattr(prov, "fleet_pods", None)
    pods: list[PodRow] = list(fleet_pods()) if fleet_pods is not None else []
    if fleet_pods is None:
        console.print(f"provider {provider!r} keeps no pods")
    else:
        console.print(pods_table(pods))
    console.print(jobs_table(queue, pods))
    console.print(spend_line(ledger or queue.parent / "costs.jsonl", provider, pods), highlight=False)


# `metatrain fleet simulate` (src/metatrain/cli/fleet_simulate.py) is registered on fleet_app here.
fleet_app.command("simulate")(simulate)
