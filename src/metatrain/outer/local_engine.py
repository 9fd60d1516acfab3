"""The torch side of the local backend: one model host per base model, LoRA adapters, losses, decoding.

Nothing here knows about Tinker's client classes; :mod:`metatrain.outer.local_backend` wraps it in
the client surface. A :class:`ModelHost` owns one base model (plus one peft LoRA adapter per training
client) and a single worker thread: every operation on the model runs on that thread, in submission
order, except that queued sampling requests are gathered into one batched generation. Sampling never
changes weights, so running it ahead of queued training work is safe; a snapshot is frozen before the
client that samples from it exists.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import attrs
import torch

StopReason = Literal["length", "stop"]
LossName = Literal["cross_entropy", "importance_sampling", "ppo"]
SUPPORTED_LOSSES: tuple[str, ...] = ("cross_entropy", "importance_sampling", "ppo")
LOSS_INPUTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # loss -> (required keys besides target_tokens, optional keys)
    "cross_entropy": (frozenset(), frozenset({"weights"})),
    "importance_sampling": (frozenset({"logprobs", "advantages"}), frozenset()),
    "ppo": (frozenset({"logprobs", "advantages"}), frozenset()),
}
PPO_CLIP_LOW = 0.8
PPO_CLIP_HIGH = 1.2
LORA_ALPHA = 32


# ---------------------------------------------------------------------------------------------
# Losses (pure functions on per-token tensors)
# ---------------------------------------------------------------------------------------------


def elementwise_loss(
    loss_fn: str, target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> torch.Tensor:
    """Per-token loss of one datum (summed by the caller), as Tinker's built-in losses define it.

    ``cross_entropy``: ``-weights * logp``. ``importance_sampling``: ``-(p/q) * A`` with
    ``p/q = exp(logp - sampling_logprobs)``. ``ppo``: ``-min(r * A, clip(r, low, high) * A)`` with
    ``low``/``high`` from ``config`` keys ``clip_low_threshold``/``clip_high_threshold`` (0.8/1.2).
    """
    if loss_fn == "cross_entropy":
        weights = inputs.get("weights")
        if weights is None:
            weights = torch.ones_like(target_logprobs)
        return -(weights * target_logprobs)
    ratio = torch.exp(target_logprobs - inputs["logprobs"])
    advantages = inputs["advantages"]
    if loss_fn == "importance_sampling":
        return -(ratio * advantages)
    if loss_fn == "ppo":
        low = float(config.get("clip_low_threshold", PPO_CLIP_LOW))
        high = float(config.get("clip_high_threshold", PPO_CLIP_HIGH))
        if not 0 < low <= 1 <= high:
            raise ValueError(
                f"ppo needs 0 < clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}"
            )
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages)
    raise ValueError(
        f"unsupported loss_fn {loss_fn!r}; the local backend supports {', '.join(SUPPORTED_LOSSES)}"
    )


@attrs.frozen
class TrainExample:
    """One datum in tensor form: input tokens, target tokens, and the loss inputs (float tensors)."""

    input_tokens: list[int]
    target_tokens: torch.Tensor
    loss_inputs: dict[str, torch.Tensor]


def check_loss_inputs(loss_fn: str, keys: set[str]) -> None:
    """Raise ValueError unless ``keys`` (besides target_tokens) fit ``loss_fn``'s inputs exactly."""
    if loss_fn not in LOSS_INPUTS:
        raise ValueError(
            f"unsupported loss_fn {loss_fn!r}; the local backend supports {', '.join(SUPPORTED_LOSSES)}"
        )
    required, optional = LOSS_INPUTS[loss_fn]
    missing = required - keys
    extra = keys - required - optional
    if missing:
        raise ValueError(f"loss_fn {loss_fn!r} needs loss_fn_inputs {sorted(missing)} (got {sorted(keys)})")
    if extra:
        allowed = sorted(required | optional | {"target_tokens"})
        raise ValueError(
            f"loss_fn {loss_fn!r} does not take loss_fn_inputs {sorted(extra)}; allowed: {allowed}"
        )


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class SampleRow:
    """One sequence to generate. ``seed`` None draws from torch's global generator."""

    prompt: tuple[int, ...]
    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_tokens: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    prompt_logprobs: bool = False


@attrs.frozen
class SampledRow:
    """What one row produced: tokens, their log-probabilities (temperature 1), why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    prompt_logprobs: list[float | None] | None = None


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``logits`` (V,) with everything outside top-k / the top-p nucleus set to -inf."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop = torch.cumsum(probs, dim=-1) - probs > top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


def _pick(logits: torch.Tensor, row: SampleRow, gen: torch.Generator | None) -> int:
    if row.temperature <= 0:
        return int(torch.argmax(logits))
    scaled = _filter_logits(logits / row.temperature, row.top_k, row.top_p)
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def _stop_window(strings: Sequence[str]) -> int:
    return 4 * max((len(s) for s in strings), default=0) + 8


def generate(
    model: Any,
    rows: Sequence[SampleRow],
    *,
    pad_id: int,
    decode: Callable[[list[int]], str] | None,
) -> list[SampledRow]:
    """Generate all ``rows`` in one left-padded batch with a KV cache; finished rows leave the batch.

    Log-probabilities are those of the model's own distribution (temperature 1, no top-k/top-p), so they
    equal what a training forward pass computes for the same tokens.
    """
    from transformers import DynamicCache

    if any(r.stop_strings for r in rows) and decode is None:
        raise ValueError("stop strings need a tokenizer; this model has none (pass stop token ids instead)")
    device = next(model.parameters()).device
    n = len(rows)
    width = max(len(r.prompt) for r in rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r.prompt) :] = torch.tensor(r.prompt, dtype=torch.long)
        mask[i, width - len(r.prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    want_prompt = any(r.prompt_logprobs for r in rows)
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        **({} if want_prompt else {"logits_to_keep": 1}),
    )
    prompt_lps: list[list[float | None] | None] = [None] * n
    if want_prompt:
        full = torch.log_softmax(out.logits.float(), dim=-1)
        for i, r in enumerate(rows):
            if r.prompt_logprobs:
                start = width - len(r.prompt)
                got = full[i, start:-1].gather(-1, ids[i, start + 1 :, None]).squeeze(-1)
                prompt_lps[i] = [None, *got.tolist()]
    logits = out.logits[:, -1, :].float()
    gens = [torch.Generator(device="cpu").manual_seed(r.seed) if r.seed is not None else None for r in rows]
    tokens: list[list[int]] = [[] for _ in rows]
    lps: list[list[float]] = [[] for _ in rows]
    reasons: list[StopReason] = ["length"] * n
    active = [i for i, r in enumerate(rows) if r.max_tokens > 0]
    if len(active) < n:
        keep = torch.tensor(active, dtype=torch.long, device=device)
        logits, mask, positions = logits[keep], mask[keep], positions[keep]
        cache.batch_select_indices(keep)
    last_pos = positions[:, -1]
    while active:
        logp = torch.log_softmax(logits, dim=-1).cpu()
        cpu_logits = logits.cpu()
        still: list[int] = []
        for j, i in enumerate(active):
            row = rows[i]
            tok = _pick(cpu_logits[j], row, gens[i])
            tokens[i].append(tok)
            lps[i].append(float(logp[j, tok]))
            if tok in row.stop_tokens or (
                row.stop_strings
                and decode is not None
                and any(s in decode(tokens[i][-_stop_window(row.stop_strings) :]) for s in row.stop_strings)
            ):
                reasons[i] = "stop"
            elif len(tokens[i]) < row.max_tokens:
                still.append(j)
        if not still:
            break
        if len(still) < len(active):
            keep = torch.tensor(still, dtype=torch.long, device=device)
            cache.batch_select_indices(keep)
            mask, last_pos = mask[keep], last_pos[keep]
        active = [active[j] for j in still]
        step_ids = torch.tensor([[tokens[i][-1]] for i in active], dtype=torch.long, device=device)
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
        last_pos = last_pos + 1
        out = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=last_pos[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1, :].float()
    return [
        SampledRow(tokens=tokens[i], logprobs=lps[i], stop_reason=reasons[i], prompt_logprobs=prompt_lps[i])
        for i in range(n)
    ]


def sequence_logprobs(
    model: Any, sequences: Sequence[Sequence[int]], targets: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Log-probability of ``targets[i][t]`` after ``sequences[i][: t + 1]``, right-padded in one batch.

    Differentiable when called with grad enabled; returns one (len_i,) float32 tensor per sequence.
    """
    device = next(model.parameters()).device
    n = len(sequences)
    width = max(len(s) for s in sequences)
    ids = torch.zeros((n, width), dtype=torch.long)
    tgt = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, (s, t) in enumerate(zip(sequences, targets, strict=True)):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        tgt[i, : len(s)] = t
        mask[i, : len(s)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, tgt.to(device)[..., None]).squeeze(-1)
    return [logp[i, : len(s)] for i, s in enumerate(sequences)]


def microbatches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive index groups whose padded size (count x longest) stays within ``token_budget``."""
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > token_budget:
            groups.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        groups.append(current)
    return groups


# ---------------------------------------------------------------------------------------------
# LoRA adapters and snapshots
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class LoraSpec:
    """How an adapter is shaped: rank, alpha, and which linear layers carry it."""

    rank: int
    alpha: int = LORA_ALPHA
    target_modules: str | tuple[str, ...] = "all-linear"

    def to_peft(self) -> Any:
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=0.0,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )

    def to_json(self) -> dict[str, Any]:
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {"rank": self.rank, "alpha": self.alpha, "target_modules": targets}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoraSpec:
        targets = data["target_modules"]
        return cls(
            rank=int(data["rank"]),
            alpha=int(data["alpha"]),
            target_modules=targets if isinstance(targets, str) else tuple(targets),
        )


@attrs.frozen(eq=False)
class Snapshot:
    """Frozen LoRA weights, in peft's file-format keys (no adapter name); None weights = the base model."""

    spec: LoraSpec | None
    weights: dict[str, torch.Tensor] | None
    label: str


def _param_key(peft_key: str, adapter: str) -> str:
    for part in ("lora_A", "lora_B"):
        marker = f".{part}."
        if marker in peft_key:
            head, tail = peft_key.split(marker, 1)
            return f"{head}.{part}.{adapter}.{tail}"
    raise ValueError(f"not a LoRA weight key: {peft_key!r}")


def _peft_key(param_name: str, adapter: str) -> str:
    return param_name.replace(f".{adapter}.", ".", 1)


class ModelHost:
    """One base model on one device, its LoRA adapters, and the worker thread that runs every op on it."""

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str = "cpu",
        sample_batch_window_s: float = 0.005,
        max_sample_batch: int = 64,
    ) -> None:
        from transformers import AutoModelForCausalLM

        self.model_dir = model_dir
        self.device = torch.device(device)
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
        model.to(self.device)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model
        self.tokenizer = _load_tokenizer(model_dir)
        self.pad_id = _pad_id(model, self.tokenizer)
        self.eos_ids = _eos_ids(model, self.tokenizer)
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 4096)
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.sample_batch_window_s = sample_batch_window_s
        self.max_sample_batch = max_sample_batch
        self._adapters: dict[str, LoraSpec] = {}
        self._slots: dict[LoraSpec, str] = {}
        self._names = itertools.count()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(
            target=self._work, name=f"metatrain-local-{model_dir.name}", daemon=True
        )
        self._thread.start()

    # -- the worker -----------------------------------------------------------------------------

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn()`` on the worker thread after everything submitted before it."""
        return self._enqueue(_Job(fn=fn, sample=None))

    def submit_sample(self, snapshot: Future[Snapshot], rows: list[SampleRow]) -> Future[Any]:
        """Generate ``rows`` with ``snapshot``'s weights; batched with other queued sampling requests.

        ``snapshot`` must be done, or be produced by a job submitted earlier (FIFO keeps that order).
        """
        return self._enqueue(_Job(fn=None, sample=(snapshot, rows)))

    def close(self) -> None:
        """Stop the worker after the queued jobs; later submissions raise RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)

    def _enqueue(self, job: _Job) -> Future[Any]:
        with self._cond:
            if self._closed:
                raise RuntimeError("the local backend is closed")
            self._jobs.append(job)
            self._cond.notify_all()
        return job.future

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            if job.sample is None:
                _run(job)
                continue
            batch = [job, *self._gather_samples()]
            self._run_samples(batch)

    def _gather_samples(self) -> list[_Job]:
        """Queued sampling jobs whose weights exist (after one batch window); other jobs keep their order."""
        deadline = time.monotonic() + self.sample_batch_window_s
        with self._cond:
            while not self._closed and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(timeout=left)
            picked = [j for j in self._jobs if j.sample is not None and j.sample[0].done()]
            taken = {id(j) for j in picked}
            self._jobs = collections.deque(j for j in self._jobs if id(j) not in taken)
        return picked

    def _run_samples(self, jobs: list[_Job]) -> None:
        groups: dict[int, tuple[Snapshot, list[_Job]]] = {}
        for j in jobs:
            if not j.future.set_running_or_notify_cancel():
                continue
            assert j.sample is not None
            try:
                snapshot = j.sample[0].result(timeout=0)
            except BaseException as exc:
                j.future.set_exception(exc)
                continue
            groups.setdefault(id(snapshot), (snapshot, []))[1].append(j)
        for snapshot, group in groups.values():
            rows = [r for j in group for r in j.sample[1]]  # type: ignore[index]
            try:
                results: list[SampledRow] = []
                with self.weights(snapshot), torch.no_grad():
                    for start in range(0, len(rows), self.max_sample_batch):
                        chunk = rows[start : start + self.max_sample_batch]
                        results.extend(generate(self.model, chunk, pad_id=self.pad_id, decode=self._decode))
            except BaseException as exc:
                for j in group:
                    j.future.set_exception(exc)
                continue
            pos = 0
            for j in group:
                k = len(j.sample[1])  # type: ignore[index]
                j.future.set_result(results[pos : pos + k])
                pos += k

    def _decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer")
        return str(self.tokenizer.decode(tokens))

    # -- adapters (call only on the worker thread) ----------------------------------------------

    def add_adapter(self, spec: LoraSpec, seed: int | None) -> str:
        """Attach a fresh LoRA adapter (B = 0, so it starts as the base model); returns its name."""
        from peft import PeftModel, get_peft_model

        name = f"a{next(self._names)}"
        if seed is not None:
            torch.manual_seed(seed)
        if isinstance(self.model, PeftModel):
            self.model.add_adapter(name, spec.to_peft())
        else:
            self.model = get_peft_model(self.model, spec.to_peft(), adapter_name=name)
        self.model.to(self.device)
        self.model.eval()
        self._adapters[name] = spec
        return name

    def adapter_params(self, name: str) -> dict[str, torch.nn.Parameter]:
        """The adapter's parameters by full name, sorted (a stable order for optimizer state)."""
        found = {
            n: p
            for n, p in self.model.named_parameters()
            if f".lora_A.{name}." in n or f".lora_B.{name}." in n
        }
        if not found:
            raise KeyError(f"no LoRA adapter named {name!r}")
        return dict(sorted(found.items()))

    def activate(self, name: str) -> None:
        """Make ``name`` the active adapter with gradients on (training)."""
        self.model.set_adapter(name)

    def snapshot(self, name: str, label: str) -> Snapshot:
        """A frozen copy of adapter ``name``'s weights."""
        weights = {_peft_key(n, name): p.detach().clone() for n, p in self.adapter_params(name).items()}
        return Snapshot(spec=self._adapters[name], weights=weights, label=label)

    def load_into(self, name: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy peft-format ``weights`` into adapter ``name`` (shapes must match)."""
        params = self.adapter_params(name)
        expected = {_peft_key(n, name) for n in params}
        if set(weights) != expected:
            missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
            raise ValueError(
                f"LoRA weights do not fit this adapter: missing {missing[:3]}, unexpected {extra[:3]}"
            )
        with torch.no_grad():
            for key, tensor in weights.items():
                params[_param_key(key, name)].copy_(tensor.to(self.device))

    @contextlib.contextmanager
    def weights(self, snapshot: Snapshot) -> Iterator[None]:
        """Run the block with ``snapshot``'s weights swapped into a matching adapter (base model if None)."""
        if snapshot.weights is None or snapshot.spec is None:
            if hasattr(self.model, "disable_adapter"):
                with self.model.disable_adapter():
                    yield
            else:
                yield
            return
        slot = self._slot(snapshot.spec)
        previous = self.model.active_adapter
        params = self.adapter_params(slot)
        saved = {n: p.data for n, p in params.items()}
        try:
            self.model.set_adapter(slot)
            for n, p in params.items():
                p.data = snapshot.weights[_peft_key(n, slot)].to(device=p.device, dtype=p.dtype)
            yield
        finally:
            for n, p in params.items():
                p.data = saved[n]
            self.model.set_adapter(previous)

    def _slot(self, spec: LoraSpec) -> str:
        """An adapter shaped like ``spec`` to borrow for sampling (a training adapter, else a new slot)."""
        for name, s in self._adapters.items():
            if s == spec:
                return name
        if spec not in self._slots:
            previous = getattr(self.model, "active_adapter", None)
            self._slots[spec] = self.add_adapter(spec, seed=0)
            if previous is not None:
                self.model.set_adapter(previous)
        return self._slots[spec]


@attrs.define
class _Job:
    fn: Callable[[], Any] | None
    sample: tuple[Future[Snapshot], list[SampleRow]] | None
    future: Future[Any] = attrs.field(factory=Future)


def _run(job: _Job) -> None:
    if not job.future.set_running_or_notify_cancel():
        return
    assert job.fn is not None
    try:
        job.future.set_result(job.fn())
    except BaseException as exc:
        job.future.set_exception(exc)


def _load_tokenizer(model_dir: Path) -> Any:
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def _pad_id(model: Any, tokenizer: Any) -> int:
    for candidate in (
        getattr(tokenizer, "pad_token_id", None),
        model.config.pad_token_id,
        getattr(tokenizer, "eos_token_id", None),
    ):
        if isinstance(candidate, int):
            return candidate
    return 0


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for source in (getattr(gen, "eos_token_id", None), model.config.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list):
            ids.update(int(x) for x in source)
    if not ids and isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


# ---------------------------------------------------------------------------------------------
# Checkpoint files
# ---------------------------------------------------------------------------------------------

CHECKPOINT_MANIFEST = "metatrain_local_checkpoint.json"
CHECKPOINT_FORMAT = 1


def write_checkpoint(
    path: Path,
    snapshot: Snapshot,
    meta: Mapping[str, Any],
    optimizer_state: Mapping[str, Any] | None,
) -> None:
    """Write adapter weights (PEFT layout), optimizer state (if given) and the manifest into ``path``."""
    from safetensors.torch import save_file

    assert snapshot.weights is not None and snapshot.spec is not None
    path.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().to("cpu").contiguous() for k, v in snapshot.weights.items()},
        str(path / "adapter_model.safetensors"),
    )
    snapshot.spec.to_peft().save_pretrained(str(path))
    if optimizer_state is not None:
        torch.save(dict(optimizer_state), path / "optimizer.pt")
    manifest = {"format_version": CHECKPOINT_FORMAT, "lora": snapshot.spec.to_json(), **meta}
    manifest["has_optimizer"] = optimizer_state is not None
    tmp = path / (CHECKPOINT_MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path / CHECKPOINT_MANIFEST)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a local checkpoint directory; ValueError naming the path if it is not one."""
    try:
        data = json.loads((path / CHECKPOINT_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path} is not a local-backend checkpoint (no readable {CHECKPOINT_MANIFEST})"
        ) from exc
    if not isinstance(data, dict) or data.get("format_version") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: unsupported local checkpoint format {data.get('format_version')!r}")
    return data


def read_checkpoint(path: Path) -> tuple[dict[str, Any], Snapshot, dict[str, Any] | None]:
    """Manifest, adapter weights (as a Snapshot) and optimizer state (None if not saved)."""
    from safetensors.torch import load_file

    manifest = read_manifest(path)
    weights = load_file(str(path / "adapter_model.safetensors"))
    snapshot = Snapshot(spec=LoraSpec.from_json(manifest["lora"]), weights=weights, label=str(path))
    optimizer = None
    if manifest.get("has_optimizer"):
        optimizer = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    return manifest, snapshot, optimizer
