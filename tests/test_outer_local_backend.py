"""The local Tinker-compatible backend (metatrain.outer.local_backend) on a tiny random llama."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch

tinker = pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

from tinker import types  # noqa: E402

from metatrain.outer.local_backend import (  # noqa: E402
    LocalBackendOptions,
    LocalServiceClient,
    LocalTrainingClient,
    use_local_backend,
)

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 .,"


def _tiny_model(path: Path) -> Path:
    """A 2-layer, hidden-32 llama with a character-level tokenizer (ids 0 pad, 1 eos, 2.. chars)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    torch.manual_seed(0)
    settings: dict[str, Any] = {
        "vocab_size": len(vocab),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": None,
    }
    config = LlamaConfig(**settings)
    LlamaForCausalLM(config).save_pretrained(path)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tok.decoder = decoders.Fuse()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LocalServiceClient]:
    svc = LocalServiceClient(tmp_path / "ckpt", options=LocalBackendOptions(device="cpu"))
    yield svc
    svc.close()


def _inputs(**values: Any) -> dict[str, Any]:
    """loss_fn_inputs as TensorData (target_tokens int64, the rest float32)."""
    return {
        k: types.TensorData.from_torch(
            torch.tensor(v, dtype=torch.long if k == "target_tokens" else torch.float32)
        )
        for k, v in values.items()
    }


def _client(service: LocalServiceClient, model_dir: Path, rank: int = 4) -> LocalTrainingClient:
    return service.create_lora_training_client(str(model_dir), rank=rank, seed=0)


def _base_logprobs(model_dir: Path, tokens: list[int]) -> torch.Tensor:
    """Log p(tokens[t+1] | tokens[:t+1]) from the plain transformers model (LoRA B starts at zero)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens[:-1]])).logits[0]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[1:])[:, None]).squeeze(-1)


PROMPT = [5, 6, 7]
ACTION = [10, 11, 12]


def _rl_datum(q: list[float], adv: float) -> types.Datum:
    """Prompt 5 6 7, action 10 11 12: inputs are the full sequence minus its last token, targets shifted."""
    full = PROMPT + ACTION
    n_prompt = len(PROMPT) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs=_inputs(
            target_tokens=full[1:],
            logprobs=[0.0] * n_prompt + q,
            advantages=[0.0] * n_prompt + [adv] * len(ACTION),
        ),
    )


def _action_logprobs(client: LocalTrainingClient, q: list[float]) -> torch.Tensor:
    out = client.forward([_rl_datum(q, 0.0)], "importance_sampling").result()
    return out.loss_fn_outputs[0]["logprobs"].to_torch()[-len(ACTION) :]


def test_importance_sampling_loss_matches_hand_computation(
    service: LocalServiceClient, model_dir: Path
) -> None:
    client = _client(service, model_dir)
    p = _base_logprobs(model_dir, PROMPT + ACTION)[-3:]
    q = [-3.0, -4.5, -4.0]
    adv = 0.7
    out = client.forward_backward([_rl_datum(q, adv)], "importance_sampling").result()
    expected = -sum(math.exp(float(p[i]) - q[i]) * adv for i in range(3))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    got_lp = out.loss_fn_outputs[0]["logprobs"].to_torch()
    assert torch.allclose(got_lp[-3:], p, atol=1e-5)
    elementwise = out.loss_fn_outputs[0]["elementwise_loss"].to_torch()
    assert torch.all(elementwise[:2] == 0)  # prompt positions carry no advantage
    assert isinstance(out, types.ForwardBackwardOutput)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_advantage_sign_moves_action_logprobs(
    service: LocalServiceClient, model_dir: Path, advantage: float
) -> None:
    client = _client(service, model_dir)
    q = [-4.0, -4.0, -4.0]
    before = _action_logprobs(client, q)
    client.forward_backward([_rl_datum(q, advantage)], "importance_sampling").result()
    client.optim_step(types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8)).result()
    after = _action_logprobs(client, q)
    delta = (after - before).sum().item()
    assert delta * advantage > 0, (before, after)


def test_ppo_clips_ratio_and_gradient(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    p = _base_logprobs(model_dir, PROMPT + ACTION)[-3:]
    q_low = [float(x) - 1.0 for x in p]  # ratio e ~ 2.72 > 1.2 on every action token
    # A > 0 and ratio above 1 + eps: the clipped term wins, the loss is flat in the weights.
    out = client.forward_backward([_rl_datum(q_low, 1.0)], "ppo").result()
    assert out.metrics["loss:sum"] == pytest.approx(-3 * 1.2, rel=1e-5)
    step = client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert step.metrics is not None and step.metrics["local/grad_norm"] == 0.0
    # Custom thresholds from loss_fn_config (the weights did not move: zero gradient).
    wide = {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}
    out = client.forward([_rl_datum(q_low, 1.0)], "ppo", wide).result()
    assert out.metrics["loss:sum"] == pytest.approx(-3 * 2.0, rel=1e-4)
    # A < 0 and ratio above 1 + eps: min picks the unclipped term, gradient flows.
    out = client.forward_backward([_rl_datum(q_low, -1.0)], "ppo").result()
    assert out.metrics["loss:sum"] == pytest.approx(3 * math.e, rel=1e-4)
    step = client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert step.metrics is not None and step.metrics["local/grad_norm"] > 0.0


def test_cross_entropy_uses_weights(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    full = PROMPT + ACTION
    p = _base_logprobs(model_dir, full)
    weights = [0.0, 0.0, 1.0, 0.5, 2.0]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs=_inputs(target_tokens=full[1:], weights=weights),
    )
    out = client.forward([datum], "cross_entropy").result()
    assert out.metrics["loss:sum"] == pytest.approx(-float((torch.tensor(weights) * p).sum()), rel=1e-5)


def test_bad_datums_are_refused_with_the_reason(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    good = _rl_datum([-1.0, -1.0, -1.0], 1.0)
    with pytest.raises(ValueError, match="supports cross_entropy, importance_sampling, ppo"):
        client.forward_backward([good], "cispo")
    no_adv = types.Datum(
        model_input=good.model_input,
        loss_fn_inputs={k: v for k, v in good.loss_fn_inputs.items() if k != "advantages"},
    )
    with pytest.raises(ValueError, match="needs loss_fn_inputs \\['advantages'\\]"):
        client.forward_backward([no_adv], "importance_sampling")
    with_mask = types.Datum(
        model_input=good.model_input, loss_fn_inputs={**good.loss_fn_inputs, **_inputs(mask=[1.0] * 5)}
    )
    with pytest.raises(ValueError, match="does not take loss_fn_inputs \\['mask'\\]"):
        client.forward_backward([with_mask], "importance_sampling")
    short = types.Datum(model_input=types.ModelInput.from_ints([5, 6]), loss_fn_inputs=good.loss_fn_inputs)
    with pytest.raises(ValueError, match="expected \\(2,\\)"):
        client.forward_backward([short], "importance_sampling")
    with pytest.raises(ValueError, match="No data"):
        client.forward_backward([], "importance_sampling")
    with pytest.raises(TypeError, match="AdamParams"):
        client.optim_step({"learning_rate": 1e-3})


def test_sampled_logprobs_equal_forward_logprobs(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    client.forward_backward([_rl_datum([-4.0] * 3, 1.0)], "importance_sampling").result()
    client.optim_step(types.AdamParams(learning_rate=5e-2)).result()  # non-zero LoRA weights
    sampler = client.save_weights_and_get_sampling_client()
    prompts = [[5, 6, 7], [9, 3, 4, 8, 20, 21, 22], [30]]  # different lengths: left padding in one batch
    params = types.SamplingParams(max_tokens=8, stop=[], seed=3)

    async def sample_all() -> list[types.SampleResponse]:
        return list(
            await asyncio.gather(
                *[sampler.sample_async(types.ModelInput.from_ints(p), 2, params) for p in prompts]
            )
        )

    responses = asyncio.run(sample_all())
    data, expected = [], []
    for prompt, resp in zip(prompts, responses, strict=True):
        assert len(resp.sequences) == 2
        for seq in resp.sequences:
            assert len(seq.tokens) == 8 and seq.stop_reason == "length"
            full = prompt + seq.tokens
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs=_inputs(target_tokens=full[1:], weights=[1.0] * (len(full) - 1)),
                )
            )
            expected.append(torch.tensor(seq.logprobs))
            recomputed = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()
            assert recomputed[0] is None
            assert torch.allclose(torch.tensor(recomputed[-8:]), torch.tensor(seq.logprobs), atol=1e-4)
    out = client.forward(data, "cross_entropy").result()
    for lp_out, want in zip(out.loss_fn_outputs, expected, strict=True):
        assert torch.allclose(lp_out["logprobs"].to_torch()[-8:], want, atol=1e-4)


def test_seed_reproduces_and_snapshot_stays_frozen(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    old = client.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints(PROMPT)
    params = types.SamplingParams(max_tokens=6, stop=[], seed=11)
    first = old.sample(prompt, 1, params).result().sequences[0]
    assert old.sample(prompt, 1, params).result().sequences[0].tokens == first.tokens
    full = types.ModelInput.from_ints(PROMPT + ACTION)
    before = old.compute_logprobs(full).result()
    client.forward_backward([_rl_datum([-4.0] * 3, 1.0)], "importance_sampling").result()
    client.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    new = client.save_weights_and_get_sampling_client()
    assert old.compute_logprobs(full).result() == before  # the old version is unchanged
    assert new.compute_logprobs(full).result()[-3:] != before[-3:]
    base = service.create_sampling_client(base_model=str(model_dir))
    assert torch.allclose(
        torch.tensor(base.compute_logprobs(full).result()[1:]),
        _base_logprobs(model_dir, PROMPT + ACTION),
        atol=1e-5,
    )


def test_stop_conditions_and_max_tokens(service: LocalServiceClient, model_dir: Path) -> None:
    client = _client(service, model_dir)
    sampler = client.save_weights_and_get_sampling_client()
    tokenizer = sampler.get_tokenizer()
    prompt = types.ModelInput.from_ints(PROMPT)
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, stop=[], temperature=0.0)).result()
    tokens = greedy.sequences[0].tokens
    assert len(tokens) == 12 and greedy.sequences[0].stop_reason == "length"
    # A stop token id: generation ends at its first occurrence, which is kept.
    k = 4
    first_k = tokens.index(tokens[k])
    by_id = sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=12, stop=[tokens[k]], temperature=0.0)
    ).result()
    assert by_id.sequences[0].tokens == tokens[: first_k + 1]
    assert by_id.sequences[0].stop_reason == "stop"
    # A stop string spanning two generated tokens.
    text = tokenizer.decode(tokens)
    stop = tokenizer.decode(tokens[5:7])
    end = text.index(stop) + len(stop)
    by_str = sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=12, stop=[stop], temperature=0.0)
    ).result()
    seq = by_str.sequences[0]
    assert seq.stop_reason == "stop" and tokenizer.decode(seq.tokens) == text[:end]
    # max_tokens is a hard cap.
    capped = sampler.sample(prompt, 3, types.SamplingParams(max_tokens=5, stop=[])).result()
    assert [len(s.tokens) for s in capped.sequences] == [5, 5, 5]
    with pytest.raises(ValueError, match="non-empty"):
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=5, stop=["a", ""]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sampler.sample(types.ModelInput.from_ints([999]), 1, types.SamplingParams(max_tokens=5))


def test_save_and_load_state_round_trip(service: LocalServiceClient, model_dir: Path) -> None:
    adam = types.AdamParams(learning_rate=2e-2, beta1=0.9, beta2=0.95, eps=1e-8)
    client = _client(service, model_dir)
    client.forward_backward([_rl_datum([-4.0] * 3, 1.0)], "importance_sampling").result()
    client.optim_step(adam).result()
    path = client.save_state("step1", user_metadata={"note": "x"}).result().path
    with pytest.raises(FileExistsError):
        client.save_state("step1")
    resumed = asyncio.run(service.create_training_client_from_state_with_optimizer_async(path))
    assert resumed.model_id != client.model_id
    q = [-4.0] * 3
    assert torch.equal(_action_logprobs(resumed, q), _action_logprobs(client, q))
    # Same next step on both: equal weights only if Adam's moments and step count came back too.
    fresh = service.create_training_client_from_state(path)
    for c in (client, resumed, fresh):
        c.forward_backward([_rl_datum(q, -0.5)], "importance_sampling").result()
        c.optim_step(adam).result()
    assert torch.allclose(_action_logprobs(resumed, q), _action_logprobs(client, q), atol=1e-6)
    assert not torch.allclose(_action_logprobs(fresh, q), _action_logprobs(client, q), atol=1e-6)
    run = service.create_rest_client().get_training_run_by_tinker_path(path).result()
    assert run.lora_rank == 4 and run.training_run_id == client.model_id
    sampler_path = client.save_weights_for_sampler("s").result().path
    from_disk = service.create_sampling_client(model_path=sampler_path)
    full = types.ModelInput.from_ints(PROMPT + ACTION)
    live = client.save_weights_and_get_sampling_client()
    assert from_disk.compute_logprobs(full).result() == pytest.approx(
        live.compute_logprobs(full).result(), abs=1e-6
    )
    with pytest.raises(ValueError, match="save_state path"):
        service.create_training_client_from_state(sampler_path)
    with pytest.raises(ValueError, match="not a local-backend checkpoint"):
        service.create_sampling_client(model_path=str(model_dir))


def test_cookbook_datums_and_train_step(service: LocalServiceClient, model_dir: Path) -> None:
    """The cookbook's own trajectory → Datum helpers and its train_step drive this backend."""
    from tinker_cookbook.completers import TinkerTokenCompleter
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
    from tinker_cookbook.rl.train import train_step
    from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

    client = _client(service, model_dir)
    sampler = client.save_weights_and_get_sampling_client()
    policy = TinkerTokenCompleter(cast(Any, sampler), max_tokens=4)

    async def rollout(reward: float) -> Trajectory:
        ob1 = types.ModelInput.from_ints(PROMPT)
        ac1 = await policy(ob1, stop=[])
        ob2 = ob1.append(types.EncodedTextChunk(tokens=ac1.tokens)).append_int(9)  # a two-turn episode
        ac2 = await policy(ob2, stop=[])
        return Trajectory(
            transitions=[
                Transition(ob=ob1, ac=ac1, reward=0.0, episode_done=False),
                Transition(ob=ob2, ac=ac2, reward=reward, episode_done=True),
            ],
            final_ob=types.ModelInput.empty(),
        )

    async def run() -> list[torch.Tensor]:
        trajectories = [await rollout(r) for r in (1.0, 0.0, 0.0, 1.0)]
        group = TrajectoryGroup(trajectories, [0.0] * 4, [{}] * 4)
        data, _ = assemble_training_data([group], compute_advantages([group]))
        assert len(data) == 4  # each two-turn episode extends its prompt: one datum per episode
        train_lps = await train_step(data, client, 1e-3, num_substeps=1, loss_fn="importance_sampling")
        for datum, lp in zip(data, train_lps, strict=True):
            mask = datum.loss_fn_inputs["mask"].to_torch() > 0
            sampled = datum.loss_fn_inputs["logprobs"].to_torch()
            assert torch.allclose(lp[mask], sampled[mask], atol=1e-4)  # on-policy: p == q
        return train_lps

    assert len(asyncio.run(run())) == 4
    assert client.optim_steps == 1


def test_seam_swaps_service_client_only_inside_the_block(service: LocalServiceClient) -> None:
    import tinker_cookbook.checkpoint_utils as ckpt
    from tinker_cookbook.rl import train as rl_train

    real = rl_train.tinker.ServiceClient
    with use_local_backend(service):
        assert rl_train.tinker.ServiceClient(base_url=None, user_metadata={}, display_name=None) is service
        assert rl_train.tinker.Datum is tinker.Datum
        assert tinker.ServiceClient is real and ckpt.tinker.ServiceClient is real
        with pytest.raises(RuntimeError, match="already in use"), use_local_backend(service):
            pass
    assert rl_train.tinker is tinker


@pytest.mark.slow
def test_smollm2_sample_and_train_step_on_cpu(tmp_path: Path) -> None:
    from metatrain.models import model_status

    if not model_status("smollm2-135m").prepared:
        pytest.skip("smollm2-135m is not prepared (run `metatrain models prepare smollm2-135m`)")
    with LocalServiceClient(tmp_path / "ckpt", options=LocalBackendOptions(device="cpu")) as svc:
        client = svc.create_lora_training_client("smollm2-135m", rank=8, seed=0)
        tokenizer = client.get_tokenizer()
        prompt = tokenizer.encode("The capital of France is")
        sampler = client.save_weights_and_get_sampling_client()
        seq = sampler.sample(
            types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=8)
        ).result()
        tokens = seq.sequences[0].tokens
        full = prompt + tokens
        n = len(prompt) - 1
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(full[:-1]),
            loss_fn_inputs=_inputs(
                target_tokens=full[1:],
                logprobs=[0.0] * n + (seq.sequences[0].logprobs or []),
                advantages=[0.0] * n + [1.0] * len(tokens),
            ),
        )
        out = client.forward_backward([datum], "importance_sampling").result()
        lp = out.loss_fn_outputs[0]["logprobs"].to_torch()[n:]
        assert torch.allclose(lp, torch.tensor(seq.sequences[0].logprobs), atol=1e-3)
        step = client.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        assert step.metrics is not None and step.metrics["local/grad_norm"] > 0
