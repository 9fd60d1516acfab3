"""Batched eval rollouts: turn hand-off and the progress count of finished rollouts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from metatrain.training import rollout

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'


class Tokenizer:
    pad_token = "<pad>"
    padding_side = "right"

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> str:
        return json.dumps(messages)


def test_progress_counts_finished_rollouts_and_sums_to_n(monkeypatch: pytest.MonkeyPatch) -> None:
    # Conversation k calls the tool on its first k turns, then answers; k=3 hits the turn cap.
    def generate(model: Any, tok: Any, prompts: list[str], max_tokens: int, temp: float) -> Any:
        texts = []
        for prompt in prompts:
            messages = json.loads(prompt)
            k, calls = int(messages[0]["content"]), sum(m["role"] == "tool" for m in messages)
            texts.append(CALL if calls < k else "<answer>3</answer>")
        return texts, [5] * len(texts)

    monkeypatch.setattr(rollout, "_generate_batch", generate)
    finished: list[int] = []
    out = rollout.run_rollouts(
        None,
        Tokenizer(),
        [[{"role": "user", "content": str(k)}] for k in range(4)],
        [{"add": lambda a, b: a + b} for _ in range(4)],
        [],
        max_turns=3,
        max_tokens=8,
        batch_size=2,
        on_batch=finished.append,
    )
    # Turn 1: batches [0,1] [2,3], 0 finishes. Turn 2: [1,2] [3], 1 finishes. Turn 3 (the cap): [2,3].
    assert finished == [1, 0, 1, 0, 2]
    assert sum(finished) == 4
    assert [r.turns for r in out] == [1, 2, 3, 3]
    assert [r.tool_calls for r in out] == [0, 1, 2, 3]  # the call at the cap is counted, not run
    assert [r.final_text for r in out][:3] == ["<answer>3</answer>"] * 3
    assert sum(m["role"] == "tool" for m in out[3].messages) == 2
