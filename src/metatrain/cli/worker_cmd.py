"""``metatrain worker``: drain the job queue with a compute provider (this machine, or a pod fleet)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import attrs
import typer
from rich.console import Console
from rich.logging import RichHandler

console = Console(stderr=True)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


def configure_provider(provider: Any, options: dict[str, Any]) -> Any:
    """``provider.configure(**options)``, refusing options the provider does not take (by name)."""
    given = {k: v for k, v in options.items() if v is not None}
    if attrs.has(type(provider)):
        known = set(attrs.fields_dict(type(provider)))
        unknown = sorted(k for k in given if k not in known)
        if unknown:
            flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
            _fail(f"provider {provider.name!r} does not take {flags}")
    return provider.configure(**given)


def _show(event: str, data: dict[str, Any]) -> None:
    if event == "log":
        console.print(str(data.get("message", "")), highlight=False)
    elif event == "phase":
        console.print(f"  phase {data.get('name')}", highlight=False, style="dim")


def _drain_locally(provider: Any, once: bool, stop: threading.Event) -> None:
    """A provider without its own ``drain`` (``local``): a queue ``Worker`` running the runner here."""
    from metatrain.jobs.runner import run_job
    from metatrain.jobs.worker import Worker

    def run(bundle: Path, result_dir: Path) -> Any:
        return run_job(bundle, result_dir, provider.device, _show, provider.train_wall_seconds)

    worker = Worker(provider.queue, run)
    while True:
        worker.drain()
        if once or stop.wait(2.0):
            return


def worker(
    provider: Annotated[
        str, typer.Option(help="Compute provider: local or runpod (any registered)")
    ] = "local",
    queue: Annotated[Path, typer.Option(help="Queue directory")] = Path("runs/queue"),
    max_pods: Annotated[int | None, typer.Option(min=1, help="Warm-pool cap (pod providers)")] = None,
    once: Annotated[bool, typer.Option("--once", help="Exit when the queue is empty")] = False,
    device: Annotated[str | None, typer.Option(help="cpu or cuda[:N] (local provider)")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Provider settings file (runpod: pool TOML)")
    ] = None,
) -> None:
    """Drain the job queue; every pod is terminated when the worker stops (also on SIGTERM / Ctrl-C)."""
    from metatrain.plugins import PluginError, load_plugins

    if config is not None and not config.is_file():
        _fail(f"--config {config}: no such file")
    handler = RichHandler(console=console, show_path=False)
    for name in ("metatrain_runpod", "metatrain.fleet"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # the runpod SDK configures the root logger too
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        prov = load_plugins().compute_provider(provider)
    except PluginError as exc:
        _fail(str(exc))
    prov = configure_provider(
        prov, {"queue_root": queue, "max_pods": max_pods, "device": device, "config_path": config}
    )
    stop = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        drain = getattr(prov, "drain", None)
        if drain is not None:
            drain(once=once, progress=_show, stop=stop)
        else:
            _drain_locally(prov, once, stop)
    except KeyboardInterrupt:
        console.print("interrupted: pods terminated, jobs in flight requeued")
    except (RuntimeError, ValueError) as exc:
        _fail(str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous)
    q = prov.queue
    console.print(
        f"queue {q.root}: {len(q.ids('queued'))} queued, {len(q.ids('running'))} running, "
        f"{len(q.ids('done'))} done",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
