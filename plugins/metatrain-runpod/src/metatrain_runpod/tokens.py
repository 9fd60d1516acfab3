"""Per-pod runner tokens, derived from the Runpod API key so that nothing secret is ever stored.

A restarted worker re-derives the token of each pod it created (same key, same pod name) and can
adopt the pod; a pod created under another key fails authentication and is terminated.
"""

from __future__ import annotations

import hashlib
import hmac


def runner_token(api_key: str, pod_name: str) -> str:
    """The bearer token the pod named ``pod_name`` is created with."""
    return hmac.new(
        api_key.encode(), f"metatrain-runner-token:{pod_name}".encode(), hashlib.sha256
    ).hexdigest()


def token_sha256(token: str) -> str:
    """What the state file keeps instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()
