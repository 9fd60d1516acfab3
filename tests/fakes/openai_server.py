"""A scripted OpenAI chat-completions server on 127.0.0.1 (stdlib ``http.server``, ephemeral port).

Each POST to ``/v1/chat/completions`` consumes the next :class:`Step` of the script: an assistant
turn (content and tool calls) with ``usage`` (and OpenRouter's ``usage.cost`` when set), or an HTTP
error. When the script is exhausted the server answers with a plain text turn. Requests are kept
(body and headers) for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Step:
    """One scripted response: a turn, or an error when ``status`` is not 200."""

    content: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    error: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int = 20
    cost: float | None = None


def turn(content: str = "", *calls: tuple[str, str], cost: float | None = None, **kw: Any) -> Step:
    return Step(content=content, calls=tuple(calls), cost=cost, **kw)


def error(status: int, message: str = "scripted error", retry_after_ms: int | None = 10) -> Step:
    headers = (("retry-after-ms", str(retry_after_ms)),) if retry_after_ms is not None else ()
    return Step(status=status, error=message, headers=headers)


def call(name: str, **args: str) -> tuple[str, str]:
    return name, json.dumps(args)


@attrs.define
class ScriptedServer:
    """Serves ``steps`` in order; ``requests`` holds (body, headers) of every chat request."""

    steps: list[Step] = attrs.Factory(list)
    requests: list[tuple[dict[str, Any], dict[str, str]]] = attrs.Factory(list)
    _httpd: ThreadingHTTPServer | None = None
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, *steps: Step) -> ScriptedServer:
        self.steps.extend(steps)
        return self

    def next_step(self, body: dict[str, Any], headers: dict[str, str]) -> Step:
        with self._lock:
            self.requests.append((body, headers))
            return self.steps.pop(0) if self.steps else Step(content="(script exhausted)")

    def __enter__(self) -> ScriptedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                step = server.next_step(body, {k.lower(): v for k, v in self.headers.items()})
                if step.status != 200:
                    return self._send(step.status, {"error": {"message": step.error}}, step.headers)
                self._send(200, completion(body, step))

            def _send(
                self, status: int, payload: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def completion(body: dict[str, Any], step: Step) -> dict[str, Any]:
    """The chat.completion object for one scripted step (prompt tokens ≈ request characters / 4)."""
    n = len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))
    prompt_tokens = step.prompt_tokens if step.prompt_tokens is not None else n // 4
    message: dict[str, Any] = {"role": "assistant", "content": step.content or None}
    if step.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}_{time.monotonic_ns()}",
                "type": "function",
                "function": {"name": nm, "arguments": a},
            }
            for i, (nm, a) in enumerate(step.calls)
        ]
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "total_tokens": prompt_tokens + step.completion_tokens,
    }
    if step.cost is not None:
        usage["cost"] = step.cost
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if step.calls else "stop"}
        ],
        "usage": usage,
    }
