"""Agent conversations as tokens: the first prompt, each turn's continuation, and sampled turns decoded.

The bridge never re-renders a conversation from scratch after the first turn. The observation for turn
``k+1`` is the observation for turn ``k`` + the sampled action tokens + (the end-of-turn tokens the
sampler stopped on or left out) + the rendered new messages (tool results, nudges) + the assistant
header. Every observation therefore extends the previous observation plus its action, and the
cookbook merges the whole episode into one datum (``trajectory_to_data``).

Two codecs:

* :class:`RendererCodec` uses a tinker-cookbook renderer (hosted models: ``qwen3_5_disable_thinking``
  for Qwen3.6-35B-A3B); tool calls are parsed by the renderer, then by the project's lenient dialect.
* :class:`ChatTemplateCodec` uses the tokenizer's chat template (the embedded models carry the
  project's tool-call dialect); new messages are the text the template appends for them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from metatrain.default_plugins.transformers_policy import _template_messages
from metatrain.protocols import PolicyTurn, ToolCall
from metatrain.training.dialect import parse_assistant

StopCondition = list[str] | list[int]
MARK = "\u2063metatrain-mark\u2063"


class PrefixError(RuntimeError):
    """A renderer produced a continuation that does not extend the previous observation."""


@attrs.frozen
class DecodedTurn:
    """A sampled action as the episode sees it, plus what the parser had to say."""

    turn: PolicyTurn
    parse_ok: bool
    malformed: int = 0


class PromptCodec(Protocol):
    """Turns conversations into prompt tokens and sampled tokens into agent turns."""

    def stop_condition(self) -> StopCondition: ...

    def first_prompt(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[int]:
        """Tokens of the first generation prompt (system + user + tools + assistant header)."""
        ...

    def continuation(
        self,
        history: Sequence[dict[str, Any]],
        new: Sequence[dict[str, Any]],
        action: Sequence[int],
        tools: Sequence[dict[str, Any]],
    ) -> list[int]:
        """Tokens that follow ``action``: its missing end-of-turn, ``new`` messages, the next header.

        ``history`` is the conversation up to and including the assistant message made of ``action``.
        """
        ...

    def decode(self, action: Sequence[int], call_prefix: str) -> DecodedTurn: ...


def _dialect_calls(text: str, call_prefix: str) -> tuple[str, tuple[ToolCall, ...], int]:
    parsed = parse_assistant(text)
    calls = tuple(
        ToolCall(f"{call_prefix}-{i}", c.name, json.dumps(c.arguments)) for i, c in enumerate(parsed.calls)
    )
    return parsed.content, calls, parsed.malformed


# ---------------------------------------------------------------------------------------------
# Chat templates (embedded models, local trainer)
# ---------------------------------------------------------------------------------------------


@attrs.define
class ChatTemplateCodec:
    """A HF tokenizer with a chat template that never rewrites earlier messages (the embedded ones)."""

    tokenizer: Any
    _close: str | None = None

    def _render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], gen: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            _template_messages(messages), tools=list(tools) or None, add_generation_prompt=gen, tokenize=False
        )
        return str(text)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @property
    def close(self) -> str:
        """The text the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``)."""
        if self._close is None:
            text = self._render(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}], [], False
            )
            if MARK not in text:
                raise PrefixError("the chat template dropped the assistant message's content")
            self._close = text.split(MARK, 1)[1]
        return self._close

    def _stop_text(self) -> str:
        return self.close.strip() or str(self.tokenizer.eos_token)

    def stop_condition(self) -> StopCondition:
        ids = self._encode(self._stop_text())
        return ids if len(ids) == 1 else [self._stop_text()]

    def first_prompt(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[int]:
        return self._encode(self._render(messages, tools, True))

    def continuation(
        self,
        history: Sequence[dict[str, Any]],
        new: Sequence[dict[str, Any]],
        action: Sequence[int],
        tools: Sequence[dict[str, Any]],
    ) -> list[int]:
        before = self._render(history, tools, False)
        after = self._render([*history, *new], tools, True)
        if not after.startswith(before):
            raise PrefixError("the chat template re-renders earlier messages: observations would not extend")
        stop = self._stop_text()
        ended = self.tokenizer.decode(list(action), skip_special_tokens=False).endswith(stop)
        closing = self.close[len(stop) :] if ended and self.close.startswith(stop) else self.close
        return self._encode(closing + after[len(before) :])

    def decode(self, action: Sequence[int], call_prefix: str) -> DecodedTurn:
        text = self.tokenizer.decode(list(action), skip_special_tokens=True)
        content, calls, malformed = _dialect_calls(text, call_prefix)
        turn = PolicyTurn(content=content, tool_calls=calls, tokens_out=len(action))
        return DecodedTurn(turn, parse_ok=malformed == 0, malformed=malformed)


# ---------------------------------------------------------------------------------------------
# tinker-cookbook renderers (hosted models)
# ---------------------------------------------------------------------------------------------


def tool_specs(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool schemas as cookbook ``ToolSpec`` dicts."""
    out = []
    for t in tools:
        fn = t.get("function", t)
        out.append(
            {"name": fn["name"], "description": fn.get("description", ""), "parameters": fn["parameters"]}
        )
    return out


def to_renderer_message(message: dict[str, Any]) -> dict[str, Any]:
    """An episode message (OpenAI style) as a cookbook ``Message``."""
    from tinker_cookbook.renderers import ToolCall as CookbookToolCall

    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            CookbookToolCall(
                id=c.get("id"),
                function=CookbookToolCall.FunctionBody(
                    name=c["function"]["name"], arguments=str(c["function"]["arguments"])
                ),
            )
            for c in message["tool_calls"]
        ]
    for key in ("tool_call_id", "name"):
        if message["role"] == "tool" and message.get(key):
            out[key] = message[key]
    return out


@attrs.define
class RendererCodec:
    """A cookbook renderer: its tool-prefix, per-message rendering, generation suffix and parser."""

    renderer: Any

    def stop_condition(self) -> StopCondition:
        return list(self.renderer.get_stop_sequences())

    def _conversation(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[Any]:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
        rest = [to_renderer_message(m) for m in messages if m["role"] != "system"]
        prefix = self.renderer.create_conversation_prefix_with_tools(tool_specs(tools), system_prompt=system)
        return [*prefix, *rest]

    def first_prompt(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[int]:
        return list(self.renderer.build_generation_prompt(self._conversation(messages, tools)).to_ints())

    def _end_tokens(self, action: Sequence[int]) -> list[int]:
        stops = self.stop_condition()
        if stops and isinstance(stops[0], int):
            return [] if action and action[-1] in stops else [int(stops[0])]
        text = self.renderer.tokenizer.decode(list(action))
        if any(text.endswith(str(s)) for s in stops):
            return []
        return list(self.renderer.tokenizer.encode(str(stops[0]), add_special_tokens=False)) if stops else []

    def continuation(
        self,
        history: Sequence[dict[str, Any]],
        new: Sequence[dict[str, Any]],
        action: Sequence[int],
        tools: Sequence[dict[str, Any]],
    ) -> list[int]:
        from tinker_cookbook.renderers import RenderContext

        convo = self._conversation([*history, *new], tools)
        start = len(convo) - len(new)
        last_user = max((i for i, m in enumerate(convo) if m["role"] == "user"), default=-1)
        tokens = self._end_tokens(action)
        for idx in range(start, len(convo)):
            ctx = RenderContext(
                idx=idx,
                is_last=idx == len(convo) - 1,
                prev_message=convo[idx - 1] if idx > 0 else None,
                next_message=convo[idx + 1] if idx + 1 < len(convo) else None,
                last_user_index=last_user,
            )
            rendered = self.renderer.render_message(convo[idx], ctx)
            for chunk in [rendered.header, *rendered.output]:
                if chunk is not None:
                    tokens.extend(chunk.tokens)
        suffix_ctx = RenderContext(
            idx=len(convo),
            is_last=True,
            prev_message=convo[-1],
            last_user_index=last_user,
            in_last_assistant_turn=True,
        )
        # The renderer's own generation header (what build_generation_prompt appends).
        tokens.extend(self.renderer._get_generation_suffix("assistant", suffix_ctx))
        return tokens

    def decode(self, action: Sequence[int], call_prefix: str) -> DecodedTurn:
        from tinker_cookbook.renderers import get_text_content

        message, termination = self.renderer.parse_response(list(action))
        text = get_text_content(message)
        calls = tuple(
            ToolCall(f"{call_prefix}-{i}", c.function.name, c.function.arguments)
            for i, c in enumerate(message.get("tool_calls") or [])
        )
        malformed = len(message.get("unparsed_tool_calls") or [])
        if not calls:
            text, calls, extra = _dialect_calls(text, call_prefix)
            malformed += extra
        turn = PolicyTurn(content=text, tool_calls=calls, tokens_out=len(action))
        return DecodedTurn(turn, parse_ok=termination.is_clean and malformed == 0, malformed=malformed)


def make_codec(model_name: str, renderer_name: str | None) -> PromptCodec:
    """A codec for the agent model: a cookbook renderer by name, else the tokenizer's chat template."""
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tokenizer = get_tokenizer(model_name)
    if renderer_name:
        from tinker_cookbook.renderers import get_renderer

        return RendererCodec(get_renderer(renderer_name, tokenizer, model_name=model_name))
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{model_name}: the tokenizer has no chat template; pass a cookbook renderer name")
    return ChatTemplateCodec(tokenizer)
