"""Chat templates: one tool-call dialect for every embedded model.

The dialect (``metatrain-toolcall-v1``, parsed by :mod:`metatrain.training.dialect`) is the same
text in every style; only the turn markers differ.

* Tools: when ``tools`` are passed, the system text (the conversation's own system message, or
  ``You are a helpful assistant.`` if it has none) is followed by a ``# Tools`` section listing each
  tool as one JSON line inside ``<tools>\\n...\\n</tools>``, and the instruction to call a tool by
  replying ``<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>``.
* Assistant tool calls: each entry of ``tool_calls`` (OpenAI ``{"type": "function", "function":
  {...}}`` or flat ``{"name", "arguments"}``) renders as
  ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`` after the message content,
  separated by ``\\n`` (none before the first call when the content is empty). ``ARGS`` is
  ``arguments | tojson`` for a mapping and the string itself for a (JSON) string.
* Tool results: a ``tool`` message renders as ``\\n<tool_response>\\nCONTENT\\n</tool_response>``
  inside a user-side turn; consecutive tool messages share one turn (as Qwen2.5 does).
* Content may be a string, ``None`` or a list of ``{"type": "text", "text": ...}`` parts.

Styles:

* ``chatml`` (SmolLM2, Qwen2.5): ``<|im_start|>ROLE\\n...<|im_end|>\\n``; a system turn is emitted
  only when there is a system message or tools; the tool turn is ``<|im_start|>user``.
* ``gemma``: starts with ``bos_token``; ``<start_of_turn>user\\n...<end_of_turn>\\n`` and
  ``<start_of_turn>model\\n...<end_of_turn>\\n``; the system text (plus tools) opens the first user
  turn followed by a blank line (or gets a user turn of its own if the conversation does not start
  with a user message).

``add_generation_prompt`` appends the assistant header (``<|im_start|>assistant\\n`` or
``<start_of_turn>model\\n``). Rendering an earlier message never depends on later ones, so the
templates are prefix-preserving as TRL's GRPOTrainer requires for multi-turn tool rollouts. They are
deliberately not byte-identical to any template TRL recognises (we install our own response parser).

Each style is ``templates/dialect.jinja`` (shared macros) followed by ``templates/<style>.jinja``.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files

TEMPLATE_STYLES: tuple[str, ...] = ("chatml", "gemma")


def _read(name: str) -> str:
    return files("metatrain.models").joinpath("templates", name).read_text(encoding="utf-8")


def _build() -> dict[str, str]:
    dialect = _read("dialect.jinja")
    return {style: dialect + _read(f"{style}.jinja") for style in TEMPLATE_STYLES}


CHAT_TEMPLATES: dict[str, str] = _build()


def chat_template(style: str) -> str:
    """The full Jinja chat template for ``style`` (KeyError for an unknown style)."""
    if style not in CHAT_TEMPLATES:
        raise KeyError(f"unknown chat template style {style!r}; known: {', '.join(CHAT_TEMPLATES)}")
    return CHAT_TEMPLATES[style]


def template_sha256(style: str) -> str:
    """SHA-256 of the template text, recorded in each prepared model's manifest."""
    return hashlib.sha256(chat_template(style).encode("utf-8")).hexdigest()
