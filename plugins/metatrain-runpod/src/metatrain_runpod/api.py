"""The Runpod SDK (``runpod==1.12.0``) behind retries, backoff and errors that say what happened.

The SDK reads ``RUNPOD_API_BASE_URL`` on every call (``runpod/api/graphql.py``), so pointing it at the
emulator needs no patching. Its pod calls use the module-global ``runpod.api_key``, set here
before each call. GraphQL errors arrive as ``runpod.error.QueryError(message)``; the query text
attached to that exception carries the pods' env (their tokens) and is never logged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

OUT_OF_STOCK_MARKERS = (
    "no longer any instances available",
    "not enough free gpus",
    "no instances available",
    "does not have the resources",
)
TRANSIENT_MARKERS = ("something went wrong", "internal server error", "too many requests", "rate limit")


class RunpodApiError(RuntimeError):
    """A Runpod API call failed for good (after retries, or an error retrying cannot fix)."""


class OutOfStock(RunpodApiError):
    """The requested GPU type has no capacity right now."""


class Transient(Exception):
    """Worth retrying: a network error, a 5xx page, or Runpod's 'something went wrong'."""


def classify(exc: BaseException, api_key: str) -> BaseException:
    """Map an SDK/requests exception to Transient, OutOfStock or RunpodApiError (secrets scrubbed)."""
    import requests
    from runpod import error as rp_error

    text = str(exc).replace(api_key, "***") if api_key else str(exc)
    low = text.lower()
    if isinstance(exc, rp_error.AuthenticationError):
        return RunpodApiError(f"Runpod rejected the API key: {text}")
    if isinstance(exc, rp_error.QueryError):
        if any(m in low for m in OUT_OF_STOCK_MARKERS):
            return OutOfStock(text)
        if any(m in low for m in TRANSIENT_MARKERS):
            return Transient(text)
        return RunpodApiError(f"Runpod API error: {text}")
    if isinstance(exc, requests.RequestException):
        return Transient(f"{type(exc).__name__}: {text[:300]}")
    if isinstance(exc, ValueError) and "No GPU found" in text:
        return RunpodApiError(f"unknown GPU type: {text}")
    return exc


@attrs.define
class RunpodApi:
    """Pod calls with bounded retries: ``attempts`` tries, exponential backoff capped at ``backoff_max_s``."""

    api_key: str = attrs.field(repr=False)
    attempts: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    on_retry: Callable[[str, int, str], None] | None = None
    """Called as ``on_retry(what, attempt, reason)`` before each backoff sleep."""

    def __attrs_post_init__(self) -> None:
        if not self.api_key:
            raise RunpodApiError("no Runpod API key: set RUNPOD_API_KEY")

    def _call(self, what: str, fn: Callable[[], T], recover: Callable[[], T | None] | None = None) -> T:
        import runpod

        t0 = time.monotonic()
        reason = ""
        for attempt in range(1, self.attempts + 1):
            runpod.api_key = self.api_key
            try:
                return fn()
            except Exception as exc:
                mapped = classify(exc, self.api_key)
                if not isinstance(mapped, Transient):
                    raise mapped from None
                reason = str(mapped)
            if recover is not None:
                found = recover()
                if found is not None:
                    return found
            if attempt < self.attempts:
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(
                    0.9, 1.1
                )
                if self.on_retry is not None:
                    self.on_retry(what, attempt, reason)
                self.sleep(delay)
        raise RunpodApiError(
            f"Runpod API {what} failed {self.attempts} times over {time.monotonic() - t0:.1f} s; last error: "
            f"{reason}"
        )

    def list_pods(self) -> list[dict[str, Any]]:
        import runpod

        return list(self._call("get_pods", lambda: runpod.get_pods()) or [])

    def get_pod(self, pod_id: str) -> dict[str, Any] | None:
        import runpod

        pod = self._call("get_pod", lambda: runpod.get_pod(pod_id))
        return dict(pod) if pod else None

    def gpu_types(self) -> list[dict[str, Any]]:
        import runpod

        return list(self._call("get_gpus", lambda: runpod.get_gpus()))

    def create_pod(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """Create a pod; after a transient failure, a pod that did get created under ``name`` is returned."""
        import runpod

        def recover() -> dict[str, Any] | None:
            try:
                return next((p for p in runpod.get_pods() or [] if p.get("name") == name), None)
            except Exception:
                return None

        return dict(self._call("create_pod", lambda: runpod.create_pod(name=name, **kwargs), recover))

    def terminate_pod(self, pod_id: str) -> None:
        """Terminate a pod; one that no longer exists counts as terminated."""
        import runpod

        try:
            self._call("terminate_pod", lambda: runpod.terminate_pod(pod_id))
        except RunpodApiError as exc:
            if "not found" not in str(exc).lower():
                raise
