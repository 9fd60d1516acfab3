"""Throughput of the local Tinker-compatible backend: sampling and forward_backward tokens/s.

Side by side in one run, on the same weights:
- sampling, batched: N concurrent ``sample_async`` calls (one sample each, as the cookbook's rollouts
  make them) that the backend gathers into one generation batch;
- sampling, per-request: the same N requests awaited one after another (batch of one each);
- forward_backward: one call on all N sequences (microbatched) vs N calls of one sequence each.

    .venv/bin/python benchmarks/outer_local_backend.py                    # tiny random model, CPU
    .venv/bin/python benchmarks/outer_local_backend.py --model smollm2-135m --device cuda
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tinker import types

from metatrain.outer.local_backend import LocalBackendOptions, LocalServiceClient, LocalTrainingClient


def tiny_model(path: Path, vocab: int = 512, hidden: int = 64, layers: int = 2) -> Path:
    """A random llama small enough that the benchmark measures the backend, not the matmuls."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    settings: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "pad_token_id": 0,
        "eos_token_id": 1,
    }
    LlamaForCausalLM(LlamaConfig(**settings)).save_pretrained(path)
    return path


def prompts(n: int, length: int, vocab: int) -> list[types.ModelInput]:
    g = torch.Generator().manual_seed(1)
    return [
        types.ModelInput.from_ints(torch.randint(2, vocab, (length + i % 5,), generator=g).tolist())
        for i in range(n)
    ]


async def sample_batched(sampler: Any, inputs: list[types.ModelInput], params: types.SamplingParams) -> int:
    out = await asyncio.gather(*[sampler.sample_async(p, 1, params) for p in inputs])
    return sum(len(r.sequences[0].tokens) for r in out)


async def sample_serial(sampler: Any, inputs: list[types.ModelInput], params: types.SamplingParams) -> int:
    total = 0
    for p in inputs:
        total += len((await sampler.sample_async(p, 1, params)).sequences[0].tokens)
    return total


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def datums(sampled: list[list[int]], inputs: list[types.ModelInput]) -> list[types.Datum]:
    out = []
    for prompt, tokens in zip(inputs, sampled, strict=True):
        full = prompt.to_ints() + tokens
        n = len(full) - 1
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData.from_torch(torch.tensor(full[1:])),
                    "logprobs": types.TensorData.from_torch(torch.full((n,), -3.0)),
                    "advantages": types.TensorData.from_torch(torch.ones(n)),
                },
            )
        )
    return out


def bench_training(client: LocalTrainingClient, data: list[types.Datum]) -> tuple[float, float, int]:
    tokens = sum(d.model_input.length for d in data)
    client.forward_backward(data[:2], "importance_sampling").result()  # warm-up
    t_batched, _ = timed(lambda: client.forward_backward(data, "importance_sampling").result())
    t_single, _ = timed(lambda: [client.forward_backward([d], "importance_sampling").result() for d in data])
    client.optim_step(types.AdamParams(learning_rate=0.0)).result()  # drop the accumulated gradients
    return t_batched, t_single, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default=None, help="embedded model key or model dir (default: a tiny random llama)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rank", type=int, default=8)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(tiny_model(Path(tmp) / "tiny"))
        with LocalServiceClient(Path(tmp) / "ckpt", options=LocalBackendOptions(device=args.device)) as svc:
            client = svc.create_lora_training_client(model, rank=args.rank, seed=0)
            vocab = client._host.vocab_size
            sampler = client.save_weights_and_get_sampling_client()
            inputs = prompts(args.requests, args.prompt_len, vocab)
            params = types.SamplingParams(max_tokens=args.max_tokens, stop=[], temperature=1.0, seed=0)
            asyncio.run(sample_serial(sampler, inputs[:2], params))  # warm-up
            t_b, n_b = timed(lambda: asyncio.run(sample_batched(sampler, inputs, params)))
            t_s, n_s = timed(lambda: asyncio.run(sample_serial(sampler, inputs, params)))
            sampled = [
                r.sequences[0].tokens
                for r in asyncio.run(
                    _gather([sampler.sample_async(p, 1, params) for p in inputs])  # tokens to train on
                )
            ]
            t_fb, t_f1, n_tok = bench_training(client, datums(sampled, inputs))

    print(
        f"model={model if args.model else 'tiny-random-llama'} device={args.device} requests={args.requests} "
        f"prompt~{args.prompt_len} max_tokens={args.max_tokens} rank={args.rank} "
        f"threads={torch.get_num_threads()}"
    )
    print(f"sampling  batched     : {n_b / t_b:10.1f} tok/s  ({n_b} tokens, {t_b:.2f} s)")
    print(f"sampling  per-request : {n_s / t_s:10.1f} tok/s  ({n_s} tokens, {t_s:.2f} s)")
    print(f"sampling  speed-up    : {(n_b / t_b) / (n_s / t_s):10.2f} x")
    print(f"fwd+bwd   one call    : {n_tok / t_fb:10.1f} tok/s  ({n_tok} tokens, {t_fb:.2f} s)")
    print(f"fwd+bwd   per-datum   : {n_tok / t_f1:10.1f} tok/s  ({t_f1:.2f} s)")
    print(f"fwd+bwd   speed-up    : {t_f1 / t_fb:10.2f} x")


async def _gather(coros: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*coros))


if __name__ == "__main__":
    main()
