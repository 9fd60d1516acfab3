"""Execute a notebook against one run directory: ``python -m metatrain.analysis.notebook NB RUN OUT``."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def execute(notebook: Path, run_dir: Path, out: Path, timeout: int = 600) -> None:
    """Run every cell with ``METATRAIN_RUN_DIR`` set; raises on the first failing cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    os.environ["METATRAIN_RUN_DIR"] = str(run_dir.resolve())
    os.environ.setdefault("MPLBACKEND", "Agg")
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": "."}}
    ).execute()
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


if __name__ == "__main__":
    nb_path, run, out_path = (Path(a) for a in sys.argv[1:4])
    execute(nb_path, run, out_path)
    print(f"executed {nb_path} on {run} -> {out_path}")
