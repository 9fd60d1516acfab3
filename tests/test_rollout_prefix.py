"""The eval's shared prefix, computed once: the pure layout, which models allow it, and the same
next-token logits and greedy rollouts as left-padded batches on a real (tiny, random) model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tiny_tokenizer import save_tiny_model, tiny_tokenizer

from metatrain.plugins import load_plugins
from metatrain.training import rollout
from metatrain.training.evaluation import eval_conversation, load_model, tool_schemas
from metatrain.training.rollout import (
    MIN_SHARED_PREFIX,
    PrefixCache,
    pad_after_prefix,
    run_rollouts,
    shared_prefix_length,
    shares_prefix,
)


def test_shared_prefix_length_leaves_every_row_a_token_of_its_own() -> None:
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # not all of the shorter row
    assert shared_prefix_length([[7, 8, 9]]) == 2
    assert shared_prefix_length([[1], [1, 2]]) == 0
    assert shared_prefix_length([[1, 2], [3, 4]]) == 0
    assert shared_prefix_length([]) == 0


def test_padding_goes_between_the_prefix_and_each_rows_rest() -> None:
    ids, mask = pad_after_prefix([[1, 2, 3], [1, 2, 4, 5, 6]], 2, pad=0)
    assert ids == [[1, 2, 0, 0, 3], [1, 2, 4, 5, 6]]
    assert mask == [[1, 1, 0, 0, 1], [1, 1, 1, 1, 1]]


def test_only_full_attention_models_share_a_prefix() -> None:
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    assert shares_prefix(SimpleNamespace(config=LlamaConfig()))
    assert shares_prefix(SimpleNamespace(config=Qwen2Config()))  # use_sliding_window is off
    assert not shares_prefix(
        SimpleNamespace(config=Qwen2Config(use_sliding_window=True, max_window_layers=0))
    )
    assert not shares_prefix(SimpleNamespace(config=Gemma3TextConfig()))  # sliding-window layers
    assert not shares_prefix(object())  # a stand-in without a config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    path = save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", tiny_tokenizer("chatml"))
    return load_model(Path(path), "cpu", "float32")


def _eval_prompts(tokenizer: Any, n: int = 4) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]], Any]:
    family = load_plugins().task_family("calc_chain")
    spec = family.task_spec("fast")
    examples = family.hidden_eval("fast")[:n]
    return [eval_conversation(spec, ex) for ex in examples], tool_schemas(spec), (family, examples)


def test_the_shared_prefix_gives_left_paddings_next_token_logits(tiny: tuple[Any, Any]) -> None:
    import copy

    import torch

    model, tokenizer = tiny
    conversations, schemas, _ = _eval_prompts(tokenizer)
    texts = [
        tokenizer.apply_chat_template(c, tools=schemas, add_generation_prompt=True, tokenize=False)
        for c in conversations
    ]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    shared = shared_prefix_length(rows)
    assert shared >= MIN_SHARED_PREFIX and len({len(r) for r in rows}) > 1  # a real prefix, real padding
    tokenizer.padding_side = "left"
    plain = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    left = pad_after_prefix(rows, 0, tokenizer.pad_token_id)  # how a batch without a prefix is laid out
    assert left == (plain["input_ids"].tolist(), plain["attention_mask"].tolist())
    ids, mask = pad_after_prefix(rows, shared, tokenizer.pad_token_id)
    length, prefix = PrefixCache().get(model, rows)
    assert length == shared
    cache = copy.deepcopy(prefix)
    cache.batch_repeat_interleave(len(rows))
    with torch.inference_mode():
        want = model(**plain).logits[:, -1]
        position_ids = (torch.tensor(mask).cumsum(-1) - 1).clamp(min=0)[:, shared:]
        got = model(
            input_ids=torch.tensor(ids)[:, shared:],
            attention_mask=torch.tensor(mask),
            position_ids=position_ids,
            past_key_values=cache,
        ).logits[:, -1]
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_rollouts_with_the_shared_prefix_match_left_padded_ones(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = tiny
    conversations, schemas, (family, examples) = _eval_prompts(tokenizer)
    found: list[bool] = []
    real_find = PrefixCache.find

    def counting_find(self: PrefixCache, rows: Any) -> Any:
        key = real_find(self, rows)
        found.append(key is not None)
        return key

    monkeypatch.setattr(PrefixCache, "find", counting_find)

    def play(share: bool) -> list[rollout.Rollout]:
        tools = [{fn.__name__: fn for fn in family.tools_for(ex)} for ex in examples]
        return run_rollouts(
            model, tokenizer, conversations, tools, schemas, max_turns=3, max_tokens=12,
            batch_size=3, final_answer_turn=True, share_prefix=share,
        )  # fmt: skip

    plain = play(False)
    assert found == []  # the plain run never looks for a prefix
    shared = play(True)
    assert [r.messages for r in shared] == [r.messages for r in plain]
    assert [r.completion_tokens for r in shared] == [r.completion_tokens for r in plain]
    assert found[0] is False and found[1] is True  # computed for the first batch, reused by the second
