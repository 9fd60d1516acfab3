"""``metatrain runner serve``: the runner service that GPU pods run (docs/gpu-runner-spec.md)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console

if TYPE_CHECKING:
    from metatrain.jobs.runner import Backend

runner_app = typer.Typer(
    help="The runner service: run job bundles behind an authenticated HTTP API.", no_args_is_help=True
)
console = Console(stderr=True)
DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
BACKENDS = ("trl", "prime-rl")


def load_executor(spec: str) -> Any:
    """Import ``MODULE:FUNCTION``."""
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise typer.BadParameter(f"cannot import {spec!r}: {exc}", param_hint="--executor") from None


@runner_app.command()
def serve(
    work_dir: Annotated[Path, typer.Option(help="Job bundles, results and state (one runner per dir)")],
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port; 0 picks a free one")] = 8765,
    token_env: Annotated[
        str, typer.Option(help="Environment variable that holds the bearer token")
    ] = "METATRAIN_RUNNER_TOKEN",
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N")] = "cpu",
    port_file: Annotated[
        Path | None, typer.Option(help="Write the bound port here once listening (useful with --port 0)")
    ] = None,
    max_bundle_mb: Annotated[int, typer.Option(min=1, help="Largest bundle archive accepted")] = 256,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    backend: Annotated[
        str, typer.Option(help="Training and eval backend: trl (sandboxed TRL) or prime-rl (GPU pods)")
    ] = "trl",
    executor: Annotated[
        str | None,
        typer.Option(
            help="MODULE:FUNCTION with run_job's signature (default: the real runner; "
            "metatrain.fleet.fake_runner:fake_run_job for tests)"
        ),
    ] = None,
) -> None:
    """Serve the runner: PUT a job bundle, poll its status, tail its logs, fetch its result."""
    from metatrain.fleet.jobhost import JobHost, MiB, runner_executor
    from metatrain.fleet.service import bind, create_app, describe, read_token, serve, write_port_file

    if not DEVICE.match(device):
        raise typer.BadParameter(f"{device!r} is not cpu, cuda or cuda:N", param_hint="--device")
    try:
        token = read_token(token_env)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if backend not in BACKENDS:
        raise typer.BadParameter(f"{backend!r} is not one of {', '.join(BACKENDS)}", param_hint="--backend")
    run = load_executor(executor) if executor else runner_executor(cast("Backend", backend))
    try:
        job_host = JobHost(
            work_dir.resolve(), device=device, run=run, max_bundle_bytes=max_bundle_mb * MiB
        ).open()
    except (RuntimeError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    try:
        app = create_app(job_host, token, max_archive_bytes=max_bundle_mb * MiB)
        sock = bind(host, port)
        address = sock.getsockname()
        if port_file is not None:
            write_port_file(port_file, address[1])
        console.print(describe(job_host, address), highlight=False)
        serve(app, sock, log_level=log_level)
    finally:
        job_host.close()
