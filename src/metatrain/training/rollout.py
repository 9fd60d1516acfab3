"""Batched multi-turn tool-calling rollouts with Hugging Face ``generate`` (used by the hidden eval)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from metatrain.training.dialect import call_tool, parse_assistant

ToolMap = dict[str, Callable[..., Any]]

FINAL_ANSWER_PROMPT = "No tool calls are left. Reply now with your final answer in the required format."
"""The user message before a final-answer turn (``EvalInterface.final_answer_turn``)."""


def needs_final_answer_prompt(
    final_answer_turn: bool, turn: int, max_turns: int, messages: list[Any]
) -> bool:
    """Whether this turn is a final-answer turn: the last one, right after a tool round."""
    last = messages[-1] if messages else {}
    return final_answer_turn and turn == max_turns - 1 and turn > 0 and last.get("role") == "tool"


def start_turn(final_answer_turn: bool, turn: int, max_turns: int, messages: list[Any]) -> bool:
    """Append the final-answer prompt when this is a final-answer turn; True when it is (no tools)."""
    final = needs_final_answer_prompt(final_answer_turn, turn, max_turns, messages)
    if final:
        messages.append({"role": "user", "content": FINAL_ANSWER_PROMPT})
    return final


def turn_token_cap(rollout_tokens: int, turn_max_tokens: int) -> int:
    """New tokens one training turn may take: the eval's per-turn cap within the rollout's budget."""
    return min(rollout_tokens, turn_max_tokens)


@attrs.define
class Rollout:
    """One conversation played out: messages, the final answer text and tool statistics."""

    messages: list[dict[str, Any]]
    final_text: str = ""
    tool_calls: int = 0
    tool_errors: int = 0
    malformed: int = 0
    turns: int = 0
    completion_tokens: int = 0


def _generate_batch(
    model: Any, tokenizer: Any, prompts: list[str], max_tokens: int, temperature: float
) -> tuple[list[str], list[int]]:
    import torch

    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    gen_kwargs: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "pad_token_id": tokenizer.pad_token_id,
        "do_sample": temperature > 0,
    }
    if temperature > 0:
        gen_kwargs["temperature"] = temperature
    with torch.inference_mode():
        out = model.generate(**enc, **gen_kwargs)
    new = out[:, enc["input_ids"].shape[1] :]
    texts = tokenizer.batch_decode(new, skip_special_tokens=True)
    pad = tokenizer.pad_token_id
    lengths = [int((row != pad).sum()) for row in new]
    return texts, lengths


def run_rollouts(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[list[dict[str, Any]]],
    tools: Sequence[ToolMap],
    tool_schemas: list[dict[str, Any]],
    *,
    max_turns: int,
    max_tokens: int,
    batch_size: int = 32,
    temperature: float = 0.0,
    on_batch: Callable[[int], None] | None = None,
    final_answer_turn: bool = False,
) -> list[Rollout]:
    """Play each conversation forward: generate, run parsed tool calls, repeat up to ``max_turns``.

    With ``final_answer_turn``, a last turn that follows a tool round is generated without tools,
    after a ``FINAL_ANSWER_PROMPT`` user message.

    ``on_batch(k)`` after each generated batch: ``k`` rollouts just finished (the counts sum to
    the number of conversations).
    """
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    rollouts = [Rollout(messages=[dict(m) for m in conv]) for conv in conversations]
    active = list(range(len(rollouts)))
    for turn in range(max_turns):
        if not active:
            break
        next_active: list[int] = []
        for start in range(0, len(active), batch_size):
            idxs = active[start : start + batch_size]
            prompts = []
            for i in idxs:
                messages = rollouts[i].messages
                final = start_turn(final_answer_turn, turn, max_turns, messages)
                prompts.append(
                    tokenizer.apply_chat_template(
                        messages,
                        tools=None if final else tool_schemas,
                        add_generation_prompt=True,
                        tokenize=False,
                    )
                )
            texts, lengths = _generate_batch(model, tokenizer, prompts, max_tokens, temperature)
            for i, text, n_tok in zip(idxs, texts, lengths, strict=True):
                r = rollouts[i]
                parsed = parse_assistant(text)
                r.turns += 1
                r.completion_tokens += n_tok
                r.malformed += parsed.malformed
                r.messages.append(parsed.as_message())
                r.final_text = parsed.content
                if parsed.calls and turn < max_turns - 1:
                    for call in parsed.calls:
                        result, ok = call_tool(tools[i], call)
                        r.tool_calls += 1
                        r.tool_errors += 0 if ok else 1
                        r.messages.append({"role": "tool", "name": call.name, "content": result})
                    next_active.append(i)
                elif parsed.calls:
                    r.tool_calls += len(parsed.calls)
            if on_batch is not None:  # rollouts of this batch that are done (no tool round follows)
                on_batch(sum(1 for i in idxs if i not in next_active))
        active = next_active
    return rollouts
