"""A local stand-in for the Tinker service: the client surface tinker-cookbook 0.5.8's RL loop calls.

``LocalServiceClient`` / ``LocalTrainingClient`` / ``LocalSamplingClient`` answer the methods that
``tinker_cookbook.rl.train.main`` (with ``rl/rollouts.py``, ``completers.py``, ``checkpoint_utils.py``
and ``rl/metrics.py``) calls on tinker 0.38's ``ServiceClient`` / ``TrainingClient`` /
``SamplingClient``, and return the same ``tinker.types`` objects inside real ``tinker.APIFuture``\\ s
(``AwaitableConcurrentFuture``: ``result()``, ``await fut.result_async()``, ``await fut``). Models are
loaded with transformers, trained as peft LoRA adapters (all linear layers but the output head,
alpha 32, no dropout) with AdamW, fp32 on CPU and bf16 (fp32 adapters) on CUDA; see
:mod:`metatrain.outer.local_engine` for the torch side.

Semantics kept from the service:
- requests of a training client run in submission order (``forward_backward`` gradients accumulate
  until ``optim_step``, which applies ``AdamParams``: lr, betas, eps, decoupled weight decay, grad clip);
- losses ``cross_entropy``, ``importance_sampling`` (``-(p/q)·A``), ``ppo`` (clipped, thresholds from
  ``loss_fn_config`` ``clip_low_threshold``/``clip_high_threshold``, default 0.8/1.2), summed over
  tokens and datums; ``loss_fn_outputs[i]`` carries per-token ``logprobs`` and ``elementwise_loss``;
- a sampling client samples from frozen weights (a copy taken when it was created), so clients of old
  versions stay valid while training goes on (off-policy rollouts);
- sampled ``logprobs`` are the model's own (temperature 1) log-probabilities of the sampled tokens, i.e.
  what ``forward`` recomputes; ``stop`` takes strings or token ids (the stop token/string is kept in
  ``tokens``), ``None`` means the model's EOS ids, ``[]`` means none;
- checkpoints are directories (their absolute path is the "tinker path"): ``save_state`` writes the LoRA
  weights (PEFT file layout), optimizer state and a manifest; ``save_weights_for_sampler`` the weights.
  Paths are ``<checkpoint_dir>/<run_id>/{weights,sampler_weights}/<name>``; every training client gets
  a new run id, as on the service.

How the cookbook gets this client. ``rl/train.py``'s ``main`` builds its service client itself,
``tinker.ServiceClient(base_url=config.base_url, ...)``; ``Config`` has no factory field, and
``base_url`` only re-points the HTTP client (no local server speaks tinker 0.38's protocol). The
narrowest seam is that one name lookup: :func:`use_local_backend` rebinds the ``tinker`` global *of
the module ``tinker_cookbook.rl.train`` only* to a copy of the ``tinker`` namespace whose
``ServiceClient`` returns our instance, for the duration of a ``with`` block (one at a time, restored
on exit). The ``tinker`` package itself, and every other module, is untouched, so a hosted run in the
same process is unaffected. Tokenizers go through the cookbook's documented
``tokenizer_utils.register_tokenizer`` (:meth:`LocalServiceClient.register_tokenizer`).
:func:`run_rl_main` does both and awaits ``main(config)``.

Sampling throughput: concurrent ``sample`` calls queued while the model is busy (plus a
``sample_batch_window_s`` wait) run as one left-padded, KV-cached batch; finished rows leave the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import threading
import types as pytypes
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from metatrain.outer.local_engine import (
    LoraSpec,
    ModelHost,
    SampledRow,
    SampleRow,
    Snapshot,
    check_loss_inputs,
    elementwise_loss,
    microbatches,
    read_checkpoint,
    read_manifest,
    sequence_logprobs,
    write_checkpoint,
)

if TYPE_CHECKING:
    import tinker
    import torch

T = TypeVar("T")
U = TypeVar("U")

__all__ = [
    "LocalBackendOptions",
    "LocalRestClient",
    "LocalSamplingClient",
    "LocalServiceClient",
    "LocalTrainingClient",
    "default_model_resolver",
    "run_rl_main",
    "use_local_backend",
]


@attrs.frozen
class LocalBackendOptions:
    """Knobs of the local backend (defaults suit CPU tests and one-GPU runs).

    ``device``: "auto" (CUDA if available), "cpu" or "cuda[:N]". ``sample_batch_window_s``: how long the
    worker waits for more sampling requests before generating a batch. ``max_sample_batch``: rows per
    generation batch. ``train_tokens_per_microbatch``: padded tokens per forward/backward chunk (bounds
    memory; gradients accumulate across chunks). ``lora_alpha``: LoRA scaling numerator.
    """

    device: str = "auto"
    sample_batch_window_s: float = 0.005
    max_sample_batch: int = 64
    train_tokens_per_microbatch: int = 16384
    lora_alpha: int = 32
    default_max_tokens: int = 1024


def default_model_resolver(base_model: str) -> Path:
    """A model directory for ``base_model``: an existing directory, or an embedded model key (prepared)."""
    path = Path(base_model).expanduser()
    if path.is_dir():
        return path.resolve()
    from metatrain.models import EMBEDDED_MODELS, prepare_model

    if base_model in EMBEDDED_MODELS:
        return prepare_model(base_model)
    raise ValueError(
        f"unknown base model {base_model!r}: give a Hugging Face model directory or an embedded model key "
        f"({', '.join(EMBEDDED_MODELS)})"
    )


def _resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    return device


# ---------------------------------------------------------------------------------------------
# Futures
# ---------------------------------------------------------------------------------------------


def _api_future(fut: Future[T]) -> tinker.APIFuture[T]:
    from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

    return AwaitableConcurrentFuture(fut)


def _mapped(fut: Future[T], fn: Callable[[T], U]) -> Future[U]:
    """A future of ``fn(fut.result())`` (exceptions pass through)."""
    out: Future[U] = Future()

    def done(src: Future[T]) -> None:
        if src.cancelled():
            out.cancel()
            return
        exc = src.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(src.result()))
        except BaseException as err:
            out.set_exception(err)

    fut.add_done_callback(done)
    return out


def _done(value: T) -> Future[T]:
    fut: Future[T] = Future()
    fut.set_result(value)
    return fut


class _ClientFuture:
    """Lets a client stand in for tinker 0.38's future-of-a-client: ``.result()``, ``await client``."""

    def _ready(self) -> Future[Any]:
        return _done(None)

    def result(self, timeout: float | None = None) -> Any:
        self._ready().result(timeout)
        return self

    async def result_async(self, timeout: float | None = None) -> Any:
        async with asyncio.timeout(timeout):
            await asyncio.wrap_future(self._ready())
        return self

    def future(self) -> Future[Any]:
        return _mapped(self._ready(), lambda _: self)

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result_async().__await__()


# ---------------------------------------------------------------------------------------------
# Service
# ---------------------------------------------------------------------------------------------


class LocalServiceClient:
    """Creates local training and sampling clients; the counterpart of ``tinker.ServiceClient``.

    ``checkpoint_dir`` receives every saved state / sampler checkpoint. ``resolve_model`` maps a base
    model name to a Hugging Face model directory (default: a directory path, or an embedded model key).
    One model is loaded per distinct directory and shared by all clients of this service. Thread-safe;
    ``close()`` stops the worker threads.
    """

    def __init__(
        self,
        checkpoint_dir: str | Path,
        *,
        options: LocalBackendOptions | None = None,
        resolve_model: Callable[[str], Path] = default_model_resolver,
    ) -> None:
        self.checkpoint_dir = Path(checkpoint_dir).expanduser().resolve()
        self.options = options or LocalBackendOptions()
        self.device = _resolve_device(self.options.device)
        self._resolve_model = resolve_model
        self._hosts: dict[Path, ModelHost] = {}
        self._lock = threading.Lock()

    # -- training clients -------------------------------------------------------------------------

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> LocalTrainingClient:
        """A training client with a fresh LoRA adapter of ``rank`` on ``base_model`` (AdamW only).

        ``train_unembed`` is accepted but the output head is never adapted (peft "all-linear");
        ``train_mlp=False`` / ``train_attn=False`` are refused rather than silently ignored.
        """
        if not (train_mlp and train_attn):
            raise ValueError(
                "the local backend adapts all linear layers; train_mlp/train_attn=False is unsupported"
            )
        if optimizer is not None and getattr(optimizer, "type", "adamw") != "adamw":
            raise ValueError(
                f"the local backend only has AdamW, not {getattr(optimizer, 'type', optimizer)!r}"
            )
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"LoRA rank must be a positive integer, got {rank!r}")
        spec = LoraSpec(rank=rank, alpha=self.options.lora_alpha)
        return LocalTrainingClient._create(self, base_model, spec, seed, user_metadata or {})

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, **kwargs: Any
    ) -> LocalTrainingClient:
        """Async variant of :meth:`create_lora_training_client` (the model loads off the event loop)."""
        return await asyncio.to_thread(self.create_lora_training_client, base_model, rank, **kwargs)

    def create_training_client_from_state(
        self, path: str, base_model: str | None = None, user_metadata: dict[str, str] | None = None, **_: Any
    ) -> LocalTrainingClient:
        """A new training client (new run id) with the weights saved at ``path``; fresh optimizer."""
        return self._from_state(path, base_model, user_metadata, with_optimizer=False)

    async def create_training_client_from_state_async(self, path: str, **kwargs: Any) -> LocalTrainingClient:
        return await asyncio.to_thread(self.create_training_client_from_state, path, **kwargs)

    def create_training_client_from_state_with_optimizer(
        self, path: str, base_model: str | None = None, user_metadata: dict[str, str] | None = None, **_: Any
    ) -> LocalTrainingClient:
        """As :meth:`create_training_client_from_state`, also restoring the optimizer (for resume)."""
        return self._from_state(path, base_model, user_metadata, with_optimizer=True)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str, **kwargs: Any
    ) -> LocalTrainingClient:
        return await asyncio.to_thread(self.create_training_client_from_state_with_optimizer, path, **kwargs)

    def _from_state(
        self, path: str, base_model: str | None, user_metadata: dict[str, str] | None, *, with_optimizer: bool
    ) -> LocalTrainingClient:
        manifest, snapshot, optim = read_checkpoint(Path(path))
        if manifest.get("kind") != "state":
            raise ValueError(
                f"{path} is a {manifest.get('kind')} checkpoint; training needs a save_state path"
            )
        assert snapshot.spec is not None
        model = base_model or str(manifest["base_model"])
        metadata = user_metadata if user_metadata is not None else dict(manifest.get("user_metadata") or {})
        client = LocalTrainingClient._create(self, model, snapshot.spec, None, metadata)
        client._restore(snapshot, optim if with_optimizer else None, int(manifest.get("optim_steps", 0)))
        return client

    # -- sampling clients -------------------------------------------------------------------------

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None, **_: Any
    ) -> LocalSamplingClient:
        """Sample from saved weights (``model_path``) or from the untouched base model (``base_model``)."""
        if model_path is None and base_model is None:
            raise ValueError("create_sampling_client needs model_path or base_model")
        if model_path is None:
            assert base_model is not None
            return LocalSamplingClient(
                self._host(base_model),
                base_model,
                _done(Snapshot(None, None, "base")),
                self.options.default_max_tokens,
            )
        manifest, snapshot, _optim = read_checkpoint(Path(model_path))
        model = base_model or str(manifest["base_model"])
        return LocalSamplingClient(self._host(model), model, _done(snapshot), self.options.default_max_tokens)

    async def create_sampling_client_async(
        self, model_path: str | None = None, **kwargs: Any
    ) -> LocalSamplingClient:
        return await asyncio.to_thread(self.create_sampling_client, model_path, **kwargs)

    # -- misc ------------------------------------------------------------------------------------

    def create_rest_client(self) -> LocalRestClient:
        """Checkpoint look-ups and deletion, as far as the cookbook uses them."""
        return LocalRestClient(self.checkpoint_dir)

    def get_server_capabilities(self) -> Any:
        """The embedded models, all trainable and sampleable."""
        from tinker import types

        from metatrain.models import EMBEDDED_MODELS

        return types.GetServerCapabilitiesResponse(
            supported_models=[
                types.SupportedModel(
                    model_name=k, max_context_length=m.context_length, trainable=True, sampleable=True
                )
                for k, m in EMBEDDED_MODELS.items()
            ]
        )

    def register_tokenizer(self, base_model: str) -> None:
        """Make the cookbook's ``get_tokenizer(base_model)`` return this model's tokenizer (offline)."""
        from tinker_cookbook.tokenizer_utils import register_tokenizer

        host = self._host(base_model)
        if host.tokenizer is None:
            raise ValueError(f"model {base_model!r} has no tokenizer files in {host.model_dir}")
        register_tokenizer(base_model, lambda: host.tokenizer)

    def close(self, *_: Any) -> Any:
        """Stop every model host's worker (queued work finishes first)."""
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
        for host in hosts:
            host.close()
        return _api_future(_done(None))

    def __enter__(self) -> LocalServiceClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _host(self, base_model: str) -> ModelHost:
        path = self._resolve_model(base_model)
        with self._lock:
            if path not in self._hosts:
                self._hosts[path] = ModelHost(
                    path,
                    device=self.device,
                    sample_batch_window_s=self.options.sample_batch_window_s,
                    max_sample_batch=self.options.max_sample_batch,
                )
            return self._hosts[path]


# ---------------------------------------------------------------------------------------------
# Training client
# ---------------------------------------------------------------------------------------------


class LocalTrainingClient(_ClientFuture):
    """One LoRA adapter being trained; the counterpart of ``tinker.TrainingClient``.

    Every method submits one job to the model's worker thread and returns a ``tinker.APIFuture`` of the
    same type the service returns; ``*_async`` variants are coroutines returning that future, as in
    tinker 0.38 (``fut = await client.forward_backward_async(...)``; ``await fut.result_async()``).
    """

    def __init__(
        self,
        service: LocalServiceClient,
        host: ModelHost,
        base_model: str,
        adapter: str,
        spec: LoraSpec,
        user_metadata: dict[str, str],
    ) -> None:
        import torch

        self._service = service
        self._host = host
        self.base_model = base_model
        self._adapter = adapter
        self._spec = spec
        self.user_metadata = dict(user_metadata)
        self.model_id = f"local-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"
        self._params = list(host.adapter_params(adapter).values())
        self._optimizer = torch.optim.AdamW(
            self._params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0
        )
        self.optim_steps = 0
        self._versions = itertools.count()

    @classmethod
    def _create(
        cls,
        service: LocalServiceClient,
        base_model: str,
        spec: LoraSpec,
        seed: int | None,
        user_metadata: dict[str, str],
    ) -> LocalTrainingClient:
        host = service._host(base_model)
        adapter = host.submit(lambda: host.add_adapter(spec, seed)).result()
        return cls(service, host, base_model, adapter, spec, user_metadata)

    @property
    def run_dir(self) -> Path:
        """Where this client's checkpoints go."""
        return self._service.checkpoint_dir / self.model_id

    # -- forward / backward -----------------------------------------------------------------------

    def forward(
        self, data: list[tinker.Datum], loss_fn: str, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> tinker.APIFuture[tinker.ForwardBackwardOutput]:
        """Loss and per-token logprobs without gradients."""
        return self._fwd_bwd(data, loss_fn, loss_fn_config, backward=False)

    async def forward_async(
        self, data: list[tinker.Datum], loss_fn: str, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> tinker.APIFuture[Any]:
        return self.forward(data, loss_fn, loss_fn_config)

    def forward_backward(
        self, data: list[tinker.Datum], loss_fn: str, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> tinker.APIFuture[tinker.ForwardBackwardOutput]:
        """Loss, per-token logprobs, and gradients accumulated into the adapter until ``optim_step``."""
        return self._fwd_bwd(data, loss_fn, loss_fn_config, backward=True)

    async def forward_backward_async(
        self, data: list[tinker.Datum], loss_fn: str, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> tinker.APIFuture[Any]:
        return self.forward_backward(data, loss_fn, loss_fn_config)

    def _fwd_bwd(
        self,
        data: list[tinker.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None,
        *,
        backward: bool,
    ) -> tinker.APIFuture[tinker.ForwardBackwardOutput]:
        if not data:
            raise ValueError("No data provided")
        examples = [_example(d, loss_fn, self._host.vocab_size) for d in data]
        config = dict(loss_fn_config or {})
        budget = self._service.options.train_tokens_per_microbatch

        def job() -> tinker.ForwardBackwardOutput:
            import torch
            from tinker import TensorData, types

            self._host.activate(self._adapter)
            outputs: list[dict[str, TensorData]] = [{} for _ in examples]
            total = 0.0
            for group in microbatches([len(e.input_tokens) for e in examples], budget):
                with torch.set_grad_enabled(backward):
                    lps = sequence_logprobs(
                        self._host.model,
                        [examples[i].input_tokens for i in group],
                        [examples[i].target_tokens for i in group],
                    )
                    losses = [
                        elementwise_loss(loss_fn, lp, _on(examples[i].loss_inputs, lp.device), config)
                        for i, lp in zip(group, lps, strict=True)
                    ]
                    loss = torch.stack([x.sum() for x in losses]).sum()
                if backward:
                    loss.backward()
                total += float(loss.detach())
                for i, lp, el in zip(group, lps, losses, strict=True):
                    outputs[i] = {
                        "logprobs": TensorData.from_torch(lp.detach().float().cpu()),
                        "elementwise_loss": TensorData.from_torch(el.detach().float().cpu()),
                    }
            return types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": total}
            )

        return _api_future(self._host.submit(job))

    # -- optimizer --------------------------------------------------------------------------------

    def optim_step(
        self, optim_params: Any = None, *, adam_params: Any = None
    ) -> tinker.APIFuture[tinker.OptimStepResponse]:
        """One AdamW step on the accumulated gradients with these hyperparameters; gradients reset."""
        from tinker import types

        if optim_params is not None and adam_params is not None:
            raise ValueError("Specify optim_params or legacy adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, types.AdamParams):
            raise TypeError(f"the local backend takes tinker.AdamParams, got {type(params).__name__}")

        def job() -> types.OptimStepResponse:
            import torch

            for group in self._optimizer.param_groups:
                group.update(
                    lr=params.learning_rate,
                    betas=(params.beta1, params.beta2),
                    eps=params.eps,
                    weight_decay=params.weight_decay,
                )
            norm = torch.nn.utils.clip_grad_norm_(
                self._params, params.grad_clip_norm if params.grad_clip_norm > 0 else float("inf")
            )
            self._optimizer.step()
            self._optimizer.zero_grad(set_to_none=True)
            self.optim_steps += 1
            return types.OptimStepResponse(metrics={"local/grad_norm": float(norm)})

        return _api_future(self._host.submit(job))

    async def optim_step_async(
        self, optim_params: Any = None, *, adam_params: Any = None
    ) -> tinker.APIFuture[Any]:
        return self.optim_step(optim_params, adam_params=adam_params)

    # -- checkpoints ------------------------------------------------------------------------------

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> tinker.APIFuture[Any]:
        """Write LoRA weights + optimizer state to ``<run_dir>/weights/<name>``; its path is the result."""
        from tinker import types

        path = self._checkpoint_path("weights", name, overwrite)

        def job() -> types.SaveWeightsResponse:
            snap = self._host.snapshot(self._adapter, label=str(path))
            self._write(path, snap, "state", self._optimizer.state_dict(), user_metadata)
            return types.SaveWeightsResponse(path=str(path))

        return _api_future(self._host.submit(job))

    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> tinker.APIFuture[Any]:
        return self.save_state(name, ttl_seconds, overwrite, user_metadata)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> tinker.APIFuture[Any]:
        """Write the LoRA weights to ``<run_dir>/sampler_weights/<name>`` for ``create_sampling_client``."""
        from tinker import types

        path = self._checkpoint_path("sampler_weights", name, overwrite=False)

        def job() -> types.SaveWeightsForSamplerResponse:
            snap = self._host.snapshot(self._adapter, label=str(path))
            self._write(path, snap, "sampler", None, user_metadata)
            return types.SaveWeightsForSamplerResponse(path=str(path))

        return _api_future(self._host.submit(job))

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> tinker.APIFuture[Any]:
        return self.save_weights_for_sampler(name, ttl_seconds, user_metadata)

    def load_state(self, path: str) -> tinker.APIFuture[Any]:
        """Replace the adapter weights with those saved at ``path`` (optimizer untouched)."""
        return self._load(path, with_optimizer=False)

    async def load_state_async(self, path: str) -> tinker.APIFuture[Any]:
        return self.load_state(path)

    def load_state_with_optimizer(self, path: str) -> tinker.APIFuture[Any]:
        """Replace adapter weights and optimizer state with those saved at ``path``."""
        return self._load(path, with_optimizer=True)

    async def load_state_with_optimizer_async(self, path: str) -> tinker.APIFuture[Any]:
        return self.load_state_with_optimizer(path)

    def _load(self, path: str, *, with_optimizer: bool) -> tinker.APIFuture[Any]:
        from tinker import types

        manifest, snapshot, optim = read_checkpoint(Path(path))
        if snapshot.spec != self._spec:
            raise ValueError(f"{path} holds a LoRA {snapshot.spec}, this client trains {self._spec}")
        if with_optimizer and optim is None:
            raise ValueError(f"{path} has no optimizer state (a sampler checkpoint?)")

        def job() -> types.LoadWeightsResponse:
            self._restore_now(
                snapshot, optim if with_optimizer else None, int(manifest.get("optim_steps", 0))
            )
            return types.LoadWeightsResponse(path=path)

        return _api_future(self._host.submit(job))

    def _restore(self, snapshot: Snapshot, optim: dict[str, Any] | None, steps: int) -> None:
        self._host.submit(lambda: self._restore_now(snapshot, optim, steps)).result()

    def _restore_now(self, snapshot: Snapshot, optim: dict[str, Any] | None, steps: int) -> None:
        assert snapshot.weights is not None
        self._host.load_into(self._adapter, snapshot.weights)
        self._optimizer.zero_grad(set_to_none=True)
        if optim is not None:
            self._optimizer.load_state_dict(optim)
            self.optim_steps = steps

    def _checkpoint_path(self, kind: str, name: str, overwrite: bool) -> Path:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"checkpoint name must be a plain non-empty name, got {name!r}")
        path = self.run_dir / kind / name
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"checkpoint {path} already exists (pass overwrite=True to replace it)")
            shutil.rmtree(path)
        return path

    def _write(
        self,
        path: Path,
        snap: Snapshot,
        kind: str,
        optim: Mapping[str, Any] | None,
        user_metadata: Mapping[str, str] | None,
    ) -> None:
        meta = {
            "kind": kind,
            "base_model": self.base_model,
            "model_dir": str(self._host.model_dir),
            "run_id": self.model_id,
            "name": path.name,
            "optim_steps": self.optim_steps,
            "user_metadata": dict(self.user_metadata),
            "checkpoint_metadata": dict(user_metadata or {}),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        write_checkpoint(path, snap, meta, optim)

    # -- sampling from this client ------------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self, name: str | None = None, retry_config: Any = None, **_: Any
    ) -> LocalSamplingClient:
        """A sampling client over a frozen copy of the weights as of every request submitted before it."""
        version = next(self._versions)
        snap = self._host.submit(
            lambda: self._host.snapshot(self._adapter, label=f"{self.model_id}@{version}")
        )
        return LocalSamplingClient(
            self._host, self.base_model, snap, self._service.options.default_max_tokens
        )

    async def save_weights_and_get_sampling_client_async(
        self, name: str | None = None, retry_config: Any = None, **kwargs: Any
    ) -> LocalSamplingClient:
        return await self.save_weights_and_get_sampling_client(name, retry_config, **kwargs)

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, **_: Any
    ) -> LocalSamplingClient:
        """A sampling client over the weights saved at ``model_path``."""
        return self._service.create_sampling_client(model_path=model_path)

    async def create_sampling_client_async(
        self, model_path: str, retry_config: Any = None, **kwargs: Any
    ) -> LocalSamplingClient:
        return await asyncio.to_thread(self.create_sampling_client, model_path)

    # -- info -------------------------------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        """The base model's tokenizer (ValueError if the model directory has none)."""
        if self._host.tokenizer is None:
            raise ValueError(f"model {self.base_model!r} has no tokenizer files in {self._host.model_dir}")
        return self._host.tokenizer

    def get_info(self) -> tinker.types.GetInfoResponse:
        from tinker import types

        return types.GetInfoResponse(
            model_data=types.ModelData(
                arch=str(getattr(self._host.model.config, "model_type", "")),
                model_name=self.base_model,
                tokenizer_id=self.base_model,
            ),
            model_id=self.model_id,
            is_lora=True,
            lora_rank=self._spec.rank,
            model_name=self.base_model,
        )

    async def get_info_async(self) -> tinker.types.GetInfoResponse:
        return self.get_info()


def _on(inputs: Mapping[str, torch.Tensor], device: Any) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in inputs.items()}


def _example(datum: tinker.Datum, loss_fn: str, vocab_size: int) -> Any:
    """Check one datum against ``loss_fn`` and turn it into tensors (ValueError with the reason)."""
    from tinker import types

    from metatrain.outer.local_engine import TrainExample

    chunks = datum.model_input.chunks
    if not all(isinstance(c, types.EncodedTextChunk) for c in chunks):
        kinds = sorted({type(c).__name__ for c in chunks})
        raise ValueError(f"the local backend takes token chunks only, got {kinds}")
    tokens = datum.model_input.to_ints()
    if not tokens:
        raise ValueError("datum has an empty model_input")
    inputs = dict(datum.loss_fn_inputs)
    if "target_tokens" not in inputs:
        raise ValueError("datum needs loss_fn_inputs['target_tokens']")
    check_loss_inputs(loss_fn, set(inputs) - {"target_tokens"})
    target = inputs.pop("target_tokens").to_torch().long()
    floats = {k: v.to_torch().float() for k, v in inputs.items()}
    for key, tensor in {"target_tokens": target, **floats}.items():
        if tuple(tensor.shape) != (len(tokens),):
            raise ValueError(
                f"loss_fn_inputs[{key!r}] has shape {tuple(tensor.shape)}, expected ({len(tokens)},)"
            )
    bad = target[(target < 0) | (target >= vocab_size)]
    if bad.numel():
        raise ValueError(f"target token {int(bad[0])} is outside the vocabulary (size {vocab_size})")
    if any(t < 0 or t >= vocab_size for t in tokens):
        raise ValueError(f"model_input has a token outside the vocabulary (size {vocab_size})")
    return TrainExample(input_tokens=tokens, target_tokens=target, loss_inputs=floats)


# ---------------------------------------------------------------------------------------------
# Sampling client
# ---------------------------------------------------------------------------------------------


class LocalSamplingClient(_ClientFuture):
    """Samples from one frozen set of weights; the counterpart of ``tinker.SamplingClient``."""

    _sequence_ids = itertools.count()

    def __init__(
        self, host: ModelHost, base_model: str, snapshot: Future[Snapshot], default_max_tokens: int = 1024
    ) -> None:
        self._host = host
        self._base_model = base_model
        self._snapshot = snapshot
        self._default_max_tokens = default_max_tokens

    def _ready(self) -> Future[Any]:
        return self._snapshot

    def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: Any = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> tinker.APIFuture[tinker.SampleResponse]:
        """``num_samples`` continuations of ``prompt`` with tokens, logprobs and stop reasons."""
        if topk_prompt_logprobs or topk_sample_logprobs or target_prompt_logprobs is not None:
            raise NotImplementedError("the local backend does not return top-k or target prompt logprobs")
        if prompt_alt_tokens_k or prompt_logprobs_last_n is not None:
            raise NotImplementedError(
                "the local backend does not support prompt_alt_tokens_k/prompt_logprobs_last_n"
            )
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
        rows = _rows(
            self._host,
            _prompt_tokens(prompt, self._host.vocab_size),
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            self._default_max_tokens,
        )
        return _api_future(_mapped(self._host.submit_sample(self._snapshot, rows), _response))

    async def sample_async(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        **kwargs: Any,
    ) -> tinker.SampleResponse:
        return await self.sample(
            prompt, num_samples, sampling_params, include_prompt_logprobs, topk_prompt_logprobs, **kwargs
        ).result_async()

    def compute_logprobs(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> tinker.APIFuture[list[float | None]]:
        """Log-probability of each prompt token given the ones before it (None for the first)."""
        tokens = _prompt_tokens(prompt, self._host.vocab_size)
        host = self._host
        n_last = prompt_logprobs_last_n
        if n_last is not None and not 1 <= n_last <= len(tokens) - 1:
            raise ValueError(f"prompt_logprobs_last_n must be in [1, {len(tokens) - 1}], got {n_last}")

        def job() -> list[float | None]:
            import torch

            if len(tokens) < 2:
                return [None] * len(tokens)
            with host.weights(self._snapshot.result()), torch.no_grad():
                (lp,) = sequence_logprobs(host.model, [tokens[:-1]], [torch.tensor(tokens[1:])])
            out: list[float | None] = [None, *lp.float().cpu().tolist()]
            if n_last is not None:
                out[: len(out) - n_last] = [None] * (len(out) - n_last)
            return out

        return _api_future(host.submit(job))

    async def compute_logprobs_async(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n).result_async()

    def get_tokenizer(self) -> Any:
        if self._host.tokenizer is None:
            raise ValueError(f"model {self._base_model!r} has no tokenizer files in {self._host.model_dir}")
        return self._host.tokenizer

    def get_base_model(self) -> str:
        return self._base_model

    async def get_base_model_async(self) -> str:
        return self._base_model

    def __reduce__(self) -> Any:
        raise TypeError(
            "a LocalSamplingClient cannot be pickled: it lives in this process (use in-process rollouts)"
        )


def _prompt_tokens(prompt: tinker.ModelInput, vocab_size: int) -> list[int]:
    from tinker import types

    if not all(isinstance(c, types.EncodedTextChunk) for c in prompt.chunks):
        raise ValueError("the local backend takes token chunks only (no image chunks)")
    tokens = prompt.to_ints()
    if not tokens:
        raise ValueError("prompt is empty")
    if any(t < 0 or t >= vocab_size for t in tokens):
        raise ValueError(f"prompt has a token outside the vocabulary (size {vocab_size})")
    return tokens


def _rows(
    host: ModelHost,
    tokens: list[int],
    n: int,
    params: tinker.SamplingParams,
    prompt_logprobs: bool,
    default_max_tokens: int,
) -> list[SampleRow]:
    """One SampleRow per sample: stop conditions resolved, max_tokens bounded by the context window."""
    room = host.context_length - len(tokens)
    if room <= 0:
        raise ValueError(f"prompt of {len(tokens)} tokens fills the context window ({host.context_length})")
    if params.max_tokens is not None and params.max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {params.max_tokens}")
    max_tokens = min(params.max_tokens if params.max_tokens is not None else default_max_tokens, room)
    stop = params.stop
    stop_tokens: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    if stop is None:
        stop_tokens = host.eos_ids
    elif isinstance(stop, str):
        stop_strings = (stop,)
    elif all(isinstance(s, int) for s in stop):
        stop_tokens = frozenset(int(s) for s in stop)  # type: ignore[arg-type]
    elif all(isinstance(s, str) for s in stop):
        stop_strings = tuple(str(s) for s in stop)
    else:
        raise ValueError("stop must be a string, a list of strings, or a list of token ids (not mixed)")
    if any(not s for s in stop_strings):
        raise ValueError("stop strings must be non-empty")
    if stop_strings and host.tokenizer is None:
        raise ValueError("stop strings need a tokenizer; this model has none (pass stop token ids instead)")
    return [
        SampleRow(
            prompt=tuple(tokens),
            max_tokens=max_tokens,
            temperature=float(params.temperature),
            top_k=int(params.top_k),
            top_p=float(params.top_p),
            stop_tokens=stop_tokens,
            stop_strings=stop_strings,
            seed=None if params.seed is None else params.seed + i,
            prompt_logprobs=prompt_logprobs and i == 0,
        )
        for i in range(n)
    ]


def _response(rows: list[SampledRow]) -> tinker.SampleResponse:
    import numpy as np
    from tinker import types

    prompt_lps = rows[0].prompt_logprobs
    return types.SampleResponse(
        sequences=[
            types.SampledSequence(
                stop_reason=r.stop_reason,
                sequence_id=f"local-seq-{next(LocalSamplingClient._sequence_ids)}",
                tokens_np=np.asarray(r.tokens, dtype=np.int32),
                logprobs_np=np.asarray(r.logprobs, dtype=np.float32),
            )
            for r in rows
        ],
        prompt_logprobs_np=None
        if prompt_lps is None
        else np.asarray([np.nan if x is None else x for x in prompt_lps], dtype=np.float32),
    )


# ---------------------------------------------------------------------------------------------
# REST client (checkpoint metadata)
# ---------------------------------------------------------------------------------------------


class LocalRestClient:
    """The two look-ups ``checkpoint_utils`` makes: a checkpoint's training run, and deleting one."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self._root = checkpoint_dir

    def get_training_run_by_tinker_path(
        self, tinker_path: str, access_scope: str = "owned"
    ) -> tinker.APIFuture[Any]:
        from tinker import types

        manifest = read_manifest(Path(tinker_path))
        run = types.TrainingRun(
            training_run_id=str(manifest["run_id"]),
            base_model=str(manifest["base_model"]),
            model_owner="local",
            is_lora=True,
            lora_rank=int(manifest["lora"]["rank"]),
            last_request_time=datetime.fromisoformat(str(manifest["created"])),
            user_metadata=dict(manifest.get("user_metadata") or {}),
        )
        return _api_future(_done(run))

    async def get_training_run_by_tinker_path_async(
        self, tinker_path: str, access_scope: str = "owned"
    ) -> Any:
        return await self.get_training_run_by_tinker_path(tinker_path, access_scope).result_async()

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> tinker.APIFuture[None]:
        """Delete a checkpoint directory under this service's checkpoint_dir (refuses anything else)."""
        path = Path(tinker_path).resolve()
        if self._root not in path.parents:
            raise ValueError(f"{tinker_path} is not under the local checkpoint directory {self._root}")
        read_manifest(path)
        shutil.rmtree(path)
        return _api_future(_done(None))

    async def delete_checkpoint_from_tinker_path_async(self, tinker_path: str) -> None:
        await self.delete_checkpoint_from_tinker_path(tinker_path).result_async()


# ---------------------------------------------------------------------------------------------
# The seam into tinker_cookbook.rl.train
# ---------------------------------------------------------------------------------------------

_SEAM_LOCK = threading.Lock()


@contextlib.contextmanager
def use_local_backend(service: LocalServiceClient) -> Iterator[LocalServiceClient]:
    """Within the block, ``tinker_cookbook.rl.train.main`` builds ``service`` instead of a ServiceClient.

    Rebinds only ``tinker_cookbook.rl.train``'s module global ``tinker`` (see the module docstring);
    one block at a time (RuntimeError otherwise); restored on exit, also on error.
    """
    import tinker
    from tinker_cookbook.rl import train as rl_train

    if not _SEAM_LOCK.acquire(blocking=False):
        raise RuntimeError("a local backend is already in use by tinker_cookbook.rl.train in this process")
    try:
        if rl_train.tinker is not tinker:
            raise RuntimeError("tinker_cookbook.rl.train.tinker was already replaced by someone else")
        proxy = pytypes.ModuleType(tinker.__name__, tinker.__doc__)
        proxy.__dict__.update(vars(tinker))

        def service_client(*_: Any, **__: Any) -> LocalServiceClient:
            return service

        proxy.ServiceClient = service_client  # type: ignore[attr-defined]
        rl_train.tinker = proxy  # type: ignore[attr-defined]
        try:
            yield service
        finally:
            rl_train.tinker = tinker  # type: ignore[attr-defined]
    finally:
        _SEAM_LOCK.release()


async def run_rl_main(config: Any, service: LocalServiceClient) -> None:
    """Run ``tinker_cookbook.rl.train.main(config)`` on ``service`` (tokenizer registered, seam installed)."""
    from tinker_cookbook.rl import train as rl_train

    await asyncio.to_thread(service.register_tokenizer, config.model_name)
    with use_local_backend(service):
        await rl_train.main(config)
