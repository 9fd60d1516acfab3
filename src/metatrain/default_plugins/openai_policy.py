"""The ``openai`` policy: any OpenAI-compatible chat-completions endpoint with tool calling.

``--agent openai:MODEL`` talks to OpenRouter with ``OPENROUTER_API_KEY``; with ``--base-url URL`` it
talks to that endpoint with ``OPENAI_API_KEY`` (or no key). Keys may come from a ``.env`` file in the
working directory, which never overrides the real environment. Calls are retried with exponential
backoff on 429, 5xx and connection errors; 401/403 raise :class:`AuthError` naming the variable,
never the key. Cost: OpenRouter's ``usage.cost`` when present, else the price table.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from metatrain.costs import PriceTable, load_prices
from metatrain.default_plugins.openai_wire import from_wire_calls, prompt_chars, to_wire
from metatrain.protocols import PolicyContext, PolicyTurn

OPENROUTER_URL = "https://openrouter.ai/api/v1"
OPENROUTER_KEY_ENV = "OPENROUTER_API_KEY"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_MAX_TOKENS = 4096
REQUEST_TIMEOUT_S = 300.0
CHARS_PER_TOKEN = 3.0
"""Conservative characters per prompt token before the endpoint has reported a real count."""


class AgentError(RuntimeError):
    """The model endpoint failed for good (retries exhausted or a request it refuses)."""


class AuthError(AgentError):
    """The endpoint rejected the credentials (HTTP 401/403)."""


@attrs.frozen
class Retry:
    """Bounded exponential backoff: ``base * 2**n`` (with jitter, at most ``cap``), ``attempts`` tries."""

    attempts: int = 6
    base: float = 1.0
    cap: float = 30.0

    def delay(self, n: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.cap, max(0.0, retry_after))
        return min(self.cap, self.base * 2**n) * (0.5 + random.random() / 2)


def _retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``retry-after`` headers)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None


@attrs.define
class OpenAIPolicy:
    """One episode's agent behind a chat-completions endpoint (``client`` is an ``openai.OpenAI``)."""

    name: str
    model: str
    client: Any
    base_url: str
    key_env: str | None
    prices: PriceTable = attrs.Factory(PriceTable)
    max_tokens: int = DEFAULT_MAX_TOKENS
    openrouter: bool = False
    retry: Retry = attrs.Factory(Retry)
    temperature: float | None = None
    sleep: Callable[[float], None] = time.sleep
    cost_note: str = ""
    calls: int = 0
    tokens_per_char: float = 1.0 / CHARS_PER_TOKEN
    usd_per_token: float = 0.0

    def estimate_usd(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> float:
        """Worst case of the next call: estimated prompt tokens × input price + max_tokens × output price."""
        prompt = prompt_chars(messages, tools) * self.tokens_per_char
        price = self.prices.lookup(self.model)
        if price is not None:
            return price.usd(int(prompt) + 1, self.max_tokens)
        return self.usd_per_token * (prompt + self.max_tokens)

    def next_turn(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyTurn:
        self.calls += 1
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_wire(messages),
            "tools": list(tools),
            "max_tokens": self.max_tokens,
        }
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.openrouter:
            request["extra_body"] = {"usage": {"include": True}}
        response = self._create(request)
        if not response.choices:
            raise AgentError(f"{self.base_url} returned no choices for model {self.model!r}")
        message = response.choices[0].message
        tokens_in, tokens_out, usd, note = self._usage(response)
        chars = prompt_chars(messages, tools)
        if tokens_in and chars:
            self.tokens_per_char = max(self.tokens_per_char, tokens_in / chars)
        if response.choices[0].finish_reason == "length":
            note = "; ".join(filter(None, [note, f"output truncated at max_tokens={self.max_tokens}"]))
        self.cost_note = note
        return PolicyTurn(
            content=message.content or "",
            tool_calls=from_wire_calls(message.tool_calls, f"{self.name}-{self.calls}"),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            usd=usd,
            model=self.model,
        )

    def _usage(self, response: Any) -> tuple[int, int, float, str]:
        """Tokens and USD of one response, and a note when the price had to be guessed."""
        usage = response.usage
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        reported = getattr(usage, "cost", None) if usage is not None else None
        if isinstance(reported, int | float) and reported >= 0:
            if tokens_in + tokens_out:
                self.usd_per_token = max(self.usd_per_token, float(reported) / (tokens_in + tokens_out))
            return tokens_in, tokens_out, float(reported), ""
        price = self.prices.lookup(self.model, str(getattr(response, "model", "") or ""))
        if price is None:
            return tokens_in, tokens_out, 0.0, f"no price for model {self.model!r}: usd recorded as 0"
        return tokens_in, tokens_out, price.usd(tokens_in, tokens_out), ""

    def _create(self, request: dict[str, Any]) -> Any:
        """One chat completion, retried on 429/5xx/connection errors."""
        import openai

        for n in range(self.retry.attempts):
            try:
                return self.client.chat.completions.create(**request)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                hint = f"check {self.key_env}" if self.key_env else f"no key was sent: set {OPENAI_KEY_ENV}"
                raise AuthError(
                    f"{self.base_url} refused the request (HTTP {exc.status_code}): {hint}"
                ) from None
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
                last: Exception = exc
            except openai.APIStatusError as exc:
                if exc.status_code < 500:
                    raise AgentError(
                        f"{self.base_url} rejected the request (HTTP {exc.status_code}): {exc.message}"
                    ) from None
                last = exc
            if n + 1 < self.retry.attempts:
                self.sleep(self.retry.delay(n, _retry_after(last)))
        raise AgentError(
            f"{self.base_url}: giving up after {self.retry.attempts} attempts ({type(last).__name__}: {last})"
        )


def load_dotenv_here() -> None:
    """Load ``./.env`` into the environment without overriding variables that are already set."""
    from dotenv import load_dotenv

    path = Path.cwd() / ".env"
    if path.is_file():
        load_dotenv(path, override=False)


@attrs.frozen
class OpenAIPolicyFactory:
    name: str = "openai"
    description: str = (
        "OpenAI-compatible chat completions with tool calling: openai:MODEL (OpenRouter, OPENROUTER_API_KEY) "
        "or --base-url URL (OPENAI_API_KEY or no key)."
    )

    def create(self, arg: str | None, context: PolicyContext) -> OpenAIPolicy:
        if not arg or not arg.strip():
            raise ValueError(
                "the openai policy needs a model: --agent openai:MODEL (e.g. openai:openai/gpt-4o-mini)"
            )
        import openai

        load_dotenv_here()
        base_url = getattr(context, "base_url", None)
        if base_url:
            key_env: str | None = OPENAI_KEY_ENV if os.environ.get(OPENAI_KEY_ENV) else None
            key = os.environ.get(OPENAI_KEY_ENV) or "none"
        else:
            base_url, key_env = OPENROUTER_URL, OPENROUTER_KEY_ENV
            key = os.environ.get(OPENROUTER_KEY_ENV, "")
            if not key:
                raise ValueError(
                    f"--agent openai:{arg} uses OpenRouter: set {OPENROUTER_KEY_ENV} (environment or "
                    "./.env), or pass --base-url for another endpoint"
                )
        max_tokens = getattr(context, "max_tokens", None) or DEFAULT_MAX_TOKENS
        client = openai.OpenAI(api_key=key, base_url=base_url, timeout=REQUEST_TIMEOUT_S, max_retries=0)
        return OpenAIPolicy(
            name=f"openai:{arg}",
            model=arg.strip(),
            client=client,
            base_url=base_url,
            key_env=key_env,
            prices=load_prices(),
            max_tokens=max_tokens,
            openrouter=base_url.rstrip("/") == OPENROUTER_URL,
        )
