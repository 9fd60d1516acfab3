"""Preparing an embedded model for a command, or a one-line error and exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from metatrain.models.sources import Progress


def prepared_model(console: Console, key: str, progress: Progress | None = None) -> Path:
    """The prepared model folder for ``key``; a model that cannot be prepared (unknown key, packages
    that cannot be installed, a checksum that does not match) is an ``error:`` line, not a traceback."""
    from metatrain.models import ModelError, prepare_model

    try:
        return prepare_model(key, progress=progress)
    except ModelError as exc:
        console.print(f"[red]error:[/] model {key}: {exc}", highlight=False)
        raise typer.Exit(2) from exc
    except KeyError as exc:
        console.print(f"[red]error:[/] {exc.args[0] if exc.args else exc}", highlight=False)
        raise typer.Exit(2) from exc
