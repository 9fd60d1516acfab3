"""``metatrain families`` and ``metatrain check-family``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def families() -> None:
    """List the registered task families (held-out ones marked) and their baselines."""
    from metatrain.baselines import StaleBaselinesError, load_baselines
    from metatrain.plugins import load_plugins

    pm = load_plugins()
    table = Table("family", "version", "held out", "eval n (fast/full)", "baselines", "distribution")
    for reg in pm.registrations("task_families"):
        fam = reg.obj
        states = []
        for budget in ("fast", "full"):
            try:
                load_baselines(fam, budget, fam.task_spec(budget).bounds.models)
                states.append(f"{budget}: ok")
            except StaleBaselinesError:
                states.append(f"{budget}: stale")
        n = "/".join(str(fam.task_spec(b).eval_n) for b in ("fast", "full"))
        table.add_row(
            fam.name,
            fam.version,
            "[bold]HELD OUT[/]" if fam.held_out else "",
            n,
            ", ".join(states),
            reg.distribution,
        )
    console.print(table)


def check_family(
    name: Annotated[str, typer.Argument(help="Registered family name")],
    budget: Annotated[
        list[str] | None, typer.Option(help="Budgets to check (default: fast and full)")
    ] = None,
) -> None:
    """Run the conformance kit on one family; exit 1 if any check fails."""
    from metatrain.conformance import check_family as run_checks
    from metatrain.plugins import PluginError, load_plugins

    try:
        family = load_plugins().task_family(name)
    except PluginError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    results = run_checks(family, tuple(budget or ("fast", "full")))
    table = Table("budget", "check", "result", "detail")
    for r in results:
        table.add_row(r.budget, r.name, "[green]pass[/]" if r.ok else "[red]FAIL[/]", r.detail[:400])
    console.print(table)
    bad = [r for r in results if not r.ok]
    console.print(f"{len(results) - len(bad)} passed, {len(bad)} failed")
    if bad:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("families")(families)
    app.command("check-family")(check_family)
