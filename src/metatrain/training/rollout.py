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


MIN_SHARED_PREFIX = 16
"""Shortest common token prefix worth computing once (the system prompt and tool schemas are
hundreds of tokens, the same in every conversation of an eval)."""


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens every row starts with, leaving each row at least one token of its own."""
    if not rows:
        return 0
    n = min(len(r) for r in rows) - 1
    first = rows[0]
    for i in range(max(0, n)):
        if any(r[i] != first[i] for r in rows[1:]):
            return i
    return max(0, n)


def pad_after_prefix(
    rows: Sequence[Sequence[int]], prefix: int, pad: int
) -> tuple[list[list[int]], list[list[int]]]:
    """Rows as ``prefix | padding | rest``, all one length, and their attention masks: the shared
    prefix sits at the same place in every row, so its keys and values can be computed once.
    With ``prefix`` 0 this is plain left padding."""
    width = max(len(r) for r in rows)
    ids, mask = [], []
    for r in rows:
        gap = width - len(r)
        ids.append([*r[:prefix], *[pad] * gap, *r[prefix:]])
        mask.append([1] * prefix + [0] * gap + [1] * (len(r) - prefix))
    return ids, mask


def shares_prefix(model: Any) -> bool:
    """Whether padding between a shared prefix and the rest leaves attention unchanged: true for
    full attention everywhere; a sliding window would count the padding against its span."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    config = getattr(config, "text_config", None) or config
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return all(t == "full_attention" for t in layer_types)
    return not getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", True) is False


@attrs.define
class PrefixCache:
    """Keys and values of shared prefixes, reused across batches and turns of one eval."""

    entries: dict[tuple[int, ...], Any] = attrs.field(factory=dict)
    limit: int = 4

    def find(self, rows: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
        """The longest cached prefix every row starts with (each keeping a token of its own)."""
        room = min(len(r) for r in rows) - 1
        fits = [k for k in self.entries if len(k) <= room and all(tuple(r[: len(k)]) == k for r in rows)]
        return max(fits, key=len, default=None)

    def get(self, model: Any, rows: Sequence[Sequence[int]]) -> tuple[int, Any]:
        """(prefix length, its cache) for ``rows``: a cached prefix they share, else their common
        prefix computed now; (0, None) when they share fewer than ``MIN_SHARED_PREFIX`` tokens."""
        import torch

        key = self.find(rows)
        if key is None:
            shared = shared_prefix_length(rows)
            if shared < MIN_SHARED_PREFIX:
                return 0, None
            key = tuple(rows[0][:shared])
            if len(self.entries) >= self.limit:
                self.entries.pop(next(iter(self.entries)))
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([key], device=model.device), use_cache=True)
            self.entries[key] = out.past_key_values
        return len(key), self.entries[key]


def _generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    max_tokens: int,
    temperature: float,
    prefixes: PrefixCache | None = None,
) -> tuple[list[str], list[int]]:
    """Generate one turn for ``prompts``. With ``prefixes``, a token prefix all prompts share is
    computed once (cached across turns) and the batch is padded after it instead of on the left."""
    import copy

    import torch

    gen_kwargs: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "pad_token_id": tokenizer.pad_token_id,
        "do_sample": temperature > 0,
    }
    if temperature > 0:
        gen_kwargs["temperature"] = temperature
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    shared, prefix_cache = prefixes.get(model, rows) if prefixes is not None else (0, None)
    ids, mask = pad_after_prefix(rows, shared, tokenizer.pad_token_id)  # no prefix: left padding
    enc: dict[str, Any] = {
        "input_ids": torch.tensor(ids, device=model.device),
        "attention_mask": torch.tensor(mask, device=model.device),
    }
    if prefix_cache is not None:
        cache = copy.deepcopy(prefix_cache)
        if len(rows) > 1:
            cache.batch_repeat_interleave(len(rows))
        enc["past_key_values"] = cache
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
    share_prefix: bool = True,
) -> list[Rollout]:
    """Play each conversation forward: generate, run parsed tool calls, repeat up to ``max_turns``.

    With ``final_answer_turn``, a last turn that follows a tool round is generated without tools,
    after a ``FINAL_ANSWER_PROMPT`` user message.

    ``on_batch(k)`` after each generated batch: ``k`` rollouts just finished (the counts sum to
    the number of conversations).

    With ``share_prefix`` (and a model whose attention allows it, ``shares_prefix``), the token
    prefix a batch's prompts share (system prompt and tool schemas) is computed once per eval.
    """
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    prefixes = PrefixCache() if share_prefix and shares_prefix(model) else None
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
            texts, lengths = _generate_batch(
                model, tokenizer, prompts, max_tokens, temperature, prefixes=prefixes
            )
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
