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
    def generate(
        model: Any, tok: Any, prompts: list[str], max_tokens: int, temp: float, prefixes: Any = None
    ) -> Any:
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


def _answering_generate(seen: list[tuple[str, bool]]) -> Any:
    """Calls a tool every turn while tools are offered; answers once they are not."""

    def generate(
        model: Any, tok: Any, prompts: list[str], max_tokens: int, temp: float, prefixes: Any = None
    ) -> Any:
        texts = []
        for prompt in prompts:
            payload = json.loads(prompt)
            texts.append("<answer>3</answer>" if payload["tools"] is None else CALL)
            seen.append((payload["messages"][-1]["role"], payload["tools"] is None))
        return texts, [5] * len(texts)

    return generate


class ToolsTokenizer(Tokenizer):
    def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> str:
        return json.dumps({"messages": messages, "tools": kw.get("tools")})


@pytest.mark.parametrize("final_answer_turn", [False, True])
def test_final_answer_turn_drops_the_tools_and_asks_for_the_answer(
    monkeypatch: pytest.MonkeyPatch, final_answer_turn: bool
) -> None:
    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(rollout, "_generate_batch", _answering_generate(seen))
    [r] = rollout.run_rollouts(
        None,
        ToolsTokenizer(),
        [[{"role": "user", "content": "go"}]],
        [{"add": lambda a, b: a + b}],
        [{"type": "function", "function": {"name": "add"}}],
        max_turns=3,
        max_tokens=8,
        final_answer_turn=final_answer_turn,
    )
    assert r.turns == 3 and r.tool_calls == (2 if final_answer_turn else 3)
    if final_answer_turn:
        assert seen == [("user", False), ("tool", False), ("user", True)]
        assert r.messages[-2] == {"role": "user", "content": rollout.FINAL_ANSWER_PROMPT}
        assert r.final_text == "<answer>3</answer>"
    else:
        assert all(not no_tools for _, no_tools in seen) and r.final_text == ""


def test_no_final_answer_turn_without_a_tool_round(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not rollout.needs_final_answer_prompt(True, 0, 1, [{"role": "user", "content": "q"}])
    assert not rollout.needs_final_answer_prompt(True, 2, 3, [{"role": "assistant", "content": "x"}])
    assert rollout.needs_final_answer_prompt(True, 2, 3, [{"role": "tool", "content": "3"}])
    assert not rollout.needs_final_answer_prompt(False, 2, 3, [{"role": "tool", "content": "3"}])


class FakeChat:
    """The ``client.chat.completions.create`` surface: a tool call while tools are offered."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def create(self, **kw: Any) -> Any:
        from types import SimpleNamespace as NS

        self.requests.append(kw)
        if "tools" in kw:
            call = NS(id=f"c{len(self.requests)}", function=NS(name="add", arguments='{"a": 1, "b": 2}'))
            message = NS(content="", tool_calls=[call])
        else:
            message = NS(content="<answer>3</answer>", tool_calls=None)
        return NS(choices=[NS(message=message)], usage=NS(completion_tokens=4))


@pytest.mark.parametrize("final_answer_turn", [False, True])
def test_the_vllm_eval_loop_plays_the_same_final_answer_turn(final_answer_turn: bool) -> None:
    from metatrain.training.primerl_backend import chat_rollout

    client = FakeChat()
    r = chat_rollout(
        client,
        "m",
        [{"role": "user", "content": "go"}],
        {"add": lambda a, b: a + b},
        [{"type": "function", "function": {"name": "add"}}],
        max_turns=3,
        max_tokens=8,
        final_answer_turn=final_answer_turn,
    )
    assert r.turns == 3 and len(client.requests) == 3
    assert ["tools" in q for q in client.requests] == [True, True, not final_answer_turn]
    if final_answer_turn:
        assert r.messages[-2] == {"role": "user", "content": rollout.FINAL_ANSWER_PROMPT}
        assert r.final_text == "<answer>3</answer>" and r.tool_calls == 2
    else:
        assert r.final_text == "" and r.tool_calls == 3
