"""Job bundles: a directory with ``bundle.json`` and a copy of the agent's workspace."""

from __future__ import annotations

import hashlib
import shutil
from datetime import datetime
from pathlib import Path

import metatrain
from metatrain.specs import BundleManifest, JobFile, TaskSpec


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_bundle(dest: Path, workspace: Path, job: JobFile, spec: TaskSpec, job_id: str, run_id: str) -> Path:
    """Snapshot ``workspace`` and the job into ``dest`` (created)."""
    if dest.exists():
        raise FileExistsError(dest)
    ws = dest / "workspace"
    shutil.copytree(workspace, ws, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = {str(p.relative_to(dest)): sha256_file(p) for p in sorted(ws.rglob("*")) if p.is_file()}
    manifest = BundleManifest(
        job_id=job_id,
        run_id=run_id,
        family=spec.family,
        family_version=spec.version,
        budget=spec.budget,
        eval_n=spec.eval_n,
        job=job,
        files=files,
        created_at=datetime.now().astimezone(),
        metatrain_version=metatrain.__version__,
        final_answer_turn=spec.eval.final_answer_turn,
        turn_max_tokens=spec.eval.max_tokens,
    )
    (dest / "bundle.json").write_text(manifest.model_dump_json(indent=2))
    return dest


def load_bundle(bundle: Path) -> BundleManifest:
    """Read and verify a bundle (every file's hash must match the manifest)."""
    manifest = BundleManifest.model_validate_json((bundle / "bundle.json").read_text())
    for rel, digest in manifest.files.items():
        path = bundle / rel
        if not path.is_file() or sha256_file(path) != digest:
            raise ValueError(f"bundle file {rel} is missing or was modified")
    return manifest
