"""``RunnerClient``: talks to a runner service (docs/gpu-runner-spec.md) over HTTP with httpx.

Errors: ``RunnerUnavailable`` when the runner cannot answer (connection refused, timeout, 5xx) and
``RunnerRejected`` when it refuses the request (4xx, with the runner's message). The token is sent
only in the ``Authorization`` header and never appears in a repr, message or log.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import httpx

from metatrain.fleet.archive import ArchiveError, pack_bundle, unpack
from metatrain.protocols import ProgressFn
from metatrain.specs import JobResult, RunnerHealth, RunnerJobStatus
from metatrain.specs.runner_api import EVAL_SECRET_HEADER, LOG_SIZE_HEADER, NEXT_OFFSET_HEADER

GiB = 1024**3


class RunnerError(RuntimeError):
    """Base of the client's errors."""


class RunnerUnavailable(RunnerError):
    """The runner did not answer usefully: connection refused, timeout, or a 5xx."""


class RunnerRejected(RunnerError):
    """The runner refused the request (4xx); ``detail`` is its message."""

    def __init__(self, status_code: int, detail: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path} → {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


@attrs.frozen
class LogChunk:
    """Bytes of one log from ``offset``; ask again from ``next_offset`` to tail it."""

    data: bytes
    offset: int
    next_offset: int
    size: int


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(detail, list):  # FastAPI request validation errors
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    return str(detail)


class RunnerClient:
    """One runner's API: ``RunnerClient("http://127.0.0.1:8765", token)``."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0, transport: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"RunnerClient({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunnerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise RunnerUnavailable(f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        self._check(response, method, path)
        return response

    def _check(self, response: httpx.Response, method: str, path: str) -> None:
        if response.status_code >= 500:
            where = f"{method} {self.base_url}{path}"
            raise RunnerUnavailable(f"{where} → {response.status_code}: {_detail(response)}")
        if response.status_code >= 400:
            raise RunnerRejected(response.status_code, _detail(response), method, path)

    def health(self) -> RunnerHealth:
        """``GET /health`` (the runner does not check the token here)."""
        return RunnerHealth.model_validate_json(self._request("GET", "/health").content)

    def wait_ready(self, timeout: float = 60.0, poll_seconds: float = 0.5) -> RunnerHealth:
        """Poll ``/health`` until the runner answers; ``RunnerUnavailable`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.health()
            except RunnerUnavailable:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(poll_seconds)

    def submit(
        self,
        bundle_dir: Path,
        job_id: str,
        eval_secret: str | None = None,
        train_wall_seconds: float | None = None,
    ) -> RunnerJobStatus:
        """Upload a bundle and start it; resubmitting the same bundle is safe (returns its status)."""
        headers = {"Content-Type": "application/gzip"}
        if eval_secret:
            headers[EVAL_SECRET_HEADER] = eval_secret
        params = {"train_wall_seconds": train_wall_seconds} if train_wall_seconds else None
        response = self._request(
            "PUT", f"/jobs/{job_id}", content=pack_bundle(bundle_dir), headers=headers, params=params
        )
        return RunnerJobStatus.model_validate_json(response.content)

    def status(self, job_id: str, since: int = 0) -> RunnerJobStatus:
        """The job's state and its progress events numbered ``since`` or later."""
        return RunnerJobStatus.model_validate_json(
            self._request("GET", f"/jobs/{job_id}", params={"since": since}).content
        )

    def logs(self, job_id: str, name: str, offset: int = 0, limit: int | None = None) -> LogChunk:
        """Bytes of ``logs/NAME`` from ``offset`` (e.g. ``train.stderr.log``, ``pre_eval.log``)."""
        params: dict[str, Any] = {"name": name, "offset": offset}
        if limit is not None:
            params["limit"] = limit
        response = self._request("GET", f"/jobs/{job_id}/logs", params=params)
        return LogChunk(
            data=response.content,
            offset=offset,
            next_offset=int(response.headers[NEXT_OFFSET_HEADER]),
            size=int(response.headers[LOG_SIZE_HEADER]),
        )

    def result(self, job_id: str) -> JobResult:
        """The finished job's ``JobResult`` (``RunnerRejected`` 409 while it runs)."""
        return JobResult.model_validate_json(self._request("GET", f"/jobs/{job_id}/result").content)

    def download_artifacts(
        self, job_id: str, dest: Path, include_weights: bool = False, max_bytes: int = 64 * GiB
    ) -> Path:
        """Unpack the job's result directory into ``dest`` (without ``train/model/`` unless asked)."""
        path = f"/jobs/{job_id}/artifacts"
        params = {"include_weights": str(include_weights).lower()}
        with tempfile.TemporaryFile() as spool:
            try:
                with self._http.stream("GET", path, params=params) as response:
                    if response.status_code >= 400:
                        response.read()
                        self._check(response, "GET", path)
                    for chunk in response.iter_bytes(1 << 20):
                        spool.write(chunk)
            except httpx.TransportError as exc:
                raise RunnerUnavailable(f"GET {self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
            spool.seek(0)
            try:
                unpack(spool, dest, max_bytes=max_bytes)
            except ArchiveError as exc:
                raise RunnerError(f"artifacts of job {job_id!r} are unusable: {exc}") from exc
        return dest

    def wait(
        self,
        job_id: str,
        progress: ProgressFn | None = None,
        poll_seconds: float = 2.0,
        timeout: float | None = None,
        unavailable_grace: float = 60.0,
    ) -> JobResult:
        """Poll until the job finishes, passing each new progress event to ``progress``.

        Tolerates the runner being unreachable for up to ``unavailable_grace`` seconds in a row;
        raises ``TimeoutError`` after ``timeout`` seconds.
        """
        start = time.monotonic()
        since, down_since = 0, None
        while True:
            try:
                status = self.status(job_id, since)
                down_since = None
            except RunnerUnavailable:
                now = time.monotonic()
                down_since = now if down_since is None else down_since
                if now - down_since >= unavailable_grace:
                    raise
            else:
                for event in status.events:
                    if progress is not None:
                        progress(event.event, event.data)
                since = status.events_total
                if status.done:
                    return self.result(job_id)
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(f"job {job_id!r} did not finish within {timeout:g} s")
            time.sleep(poll_seconds)
