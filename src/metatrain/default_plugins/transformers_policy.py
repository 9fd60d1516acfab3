"""The ``transformers`` policy: a local Hugging Face model generating in this process.

``--agent transformers:KEY`` (an embedded model key, prepared on first use) or
``transformers:/path/to/model_dir``. The conversation is rendered with the tokenizer's chat template
(tools included; the embedded models carry the project's tool-call dialect) and each generation is
parsed with :func:`metatrain.training.dialect.parse_assistant`. Greedy decoding by default; tokens are
counted and cost nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from metatrain.protocols import PolicyContext, PolicyTurn, ToolCall
from metatrain.training.dialect import parse_assistant

DEFAULT_MAX_NEW_TOKENS = 512


def _template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the messages with tool-call arguments as objects where they parse (as templates expect)."""
    out = []
    for m in messages:
        msg = dict(m)
        if msg.get("tool_calls"):
            calls = []
            for c in msg["tool_calls"]:
                raw = c["function"]["arguments"]
                try:
                    args: Any = json.loads(raw)
                except (json.JSONDecodeError, TypeError):
                    args = raw
                calls.append({**c, "function": {"name": c["function"]["name"], "arguments": args}})
            msg["tool_calls"] = calls
        out.append(msg)
    return out


@attrs.define
class TransformersPolicy:
    """Generates each turn with ``model.generate`` (``do_sample`` only when ``temperature`` > 0)."""

    name: str
    model: Any
    tokenizer: Any
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    cost_note: str = ""
    calls: int = 0

    def next_turn(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyTurn:
        import torch

        self.calls += 1
        ids = self.tokenizer.apply_chat_template(
            _template_messages(messages),
            tools=list(tools),
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        ids = {k: v.to(self.model.device) for k, v in ids.items()}
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": self.temperature}
            if self.temperature > 0
            else {"do_sample": False}
        )
        with torch.no_grad():
            out = self.model.generate(
                **ids,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                **sampling,
            )
        prompt_len = ids["input_ids"].shape[1]
        new = out[0, prompt_len:]
        parsed = parse_assistant(self.tokenizer.decode(new, skip_special_tokens=True))
        self.cost_note = f"{parsed.malformed} malformed tool call(s)" if parsed.malformed else ""
        calls = tuple(
            ToolCall(f"tf-{self.calls}-{i}", c.name, json.dumps(c.arguments))
            for i, c in enumerate(parsed.calls)
        )
        return PolicyTurn(
            content=parsed.content,
            tool_calls=calls,
            tokens_in=int(prompt_len),
            tokens_out=int(new.shape[0]),
            usd=0.0,
            model=self.name,
        )


def resolve_model_dir(arg: str) -> Path:
    """An embedded model key (prepared if needed) or an existing local model directory."""
    from metatrain.models import EMBEDDED_MODELS, prepare_model

    if arg in EMBEDDED_MODELS:
        return prepare_model(arg)
    path = Path(arg).expanduser()
    if (path / "config.json").is_file():
        return path
    raise ValueError(
        f"transformers:{arg}: not an embedded model key ({', '.join(EMBEDDED_MODELS)}) "
        "nor a local model directory with config.json"
    )


@attrs.frozen
class TransformersPolicyFactory:
    name: str = "transformers"
    description: str = (
        "A local HF model in-process: transformers:MODEL_KEY or transformers:/path/to/model_dir."
    )

    def create(self, arg: str | None, context: PolicyContext) -> TransformersPolicy:
        if not arg or not arg.strip():
            raise ValueError(
                "the transformers policy needs a model: --agent transformers:smollm2-135m (or a dir)"
            )
        model_dir = resolve_model_dir(arg.strip())
        from transformers import AutoModelForCausalLM

        from metatrain.models import load_tokenizer

        tokenizer = load_tokenizer(model_dir)
        if not tokenizer.chat_template:
            raise ValueError(f"transformers:{arg}: the tokenizer in {model_dir} has no chat template")
        device = str(getattr(context, "device", None) or "cpu")
        model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir))
        model = model.to(device).eval()
        return TransformersPolicy(
            name=f"transformers:{arg.strip()}",
            model=model,
            tokenizer=tokenizer,
            max_new_tokens=getattr(context, "max_tokens", None) or DEFAULT_MAX_NEW_TOKENS,
        )
