"""Remote compute: the runner service (``metatrain runner serve``) and its client.

``RunnerClient`` is what providers use to drive a runner; ``JobHost`` + ``create_app`` are the
server side. The HTTP contract is in docs/gpu-runner-spec.md.
"""

from __future__ import annotations

from metatrain.fleet.client import LogChunk, RunnerClient, RunnerError, RunnerRejected, RunnerUnavailable

__all__ = ["LogChunk", "RunnerClient", "RunnerError", "RunnerRejected", "RunnerUnavailable"]
