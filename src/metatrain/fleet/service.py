"""The runner service: a ``JobHost`` over HTTP (FastAPI + uvicorn); contract in docs/gpu-runner-spec.md.

Every route but ``GET /health`` needs ``Authorization: Bearer <token>``. The token comes from an
environment variable and is never logged; the eval secret arrives in the ``X-Metatrain-Eval-Secret``
header of ``PUT /jobs/{id}`` and is handed to the host in memory only.
"""

from __future__ import annotations

import hmac
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.background import BackgroundTask

from metatrain.fleet.jobhost import JobHost, JobHostError
from metatrain.specs import JobResult, RunnerHealth, RunnerJobStatus
from metatrain.specs.runner_api import EVAL_SECRET_HEADER, LOG_SIZE_HEADER, NEXT_OFFSET_HEADER

MiB = 1024**2
MIN_TOKEN_CHARS = 16


class PayloadTooLarge(JobHostError):
    status_code = 413


class Unauthorized(JobHostError):
    status_code = 401


def read_token(env_var: str, environ: Mapping[str, str] | None = None) -> str:
    """The bearer token from ``env_var`` (at least 16 characters); the value is never echoed."""
    value = (os.environ if environ is None else environ).get(env_var, "")
    if len(value) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"set {env_var} to the runner's bearer token (at least {MIN_TOKEN_CHARS} characters)"
        )
    return value


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header value."""
    return header is not None and hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


async def _receive_body(request: Request, body: IO[bytes], limit: int) -> None:
    """Copy the request body into ``body`` (rewound), refusing more than ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"bundle archive is {declared} bytes; the limit is {limit} bytes")
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"bundle archive exceeds the limit of {limit} bytes")
        body.write(chunk)
    body.seek(0)


def create_app(host: JobHost, token: str, max_archive_bytes: int = 256 * MiB) -> FastAPI:
    """The HTTP app around an opened ``host``."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the runner token must have at least {MIN_TOKEN_CHARS} characters")

    def require_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if not token_matches(authorization, token):
            raise Unauthorized("missing or wrong bearer token")

    app = FastAPI(title="metatrain runner", docs_url=None, redoc_url=None, openapi_url=None)
    auth = [Depends(require_token)]

    @app.exception_handler(JobHostError)
    async def host_error(request: Request, exc: JobHostError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code, headers=headers)

    @app.get("/health")
    def health() -> RunnerHealth:
        return host.health()

    @app.put("/jobs/{job_id}", dependencies=auth, response_model=RunnerJobStatus)
    async def submit(
        job_id: str,
        request: Request,
        train_wall_seconds: Annotated[float | None, Query(gt=0)] = None,
    ) -> JSONResponse:
        secret = request.headers.get(EVAL_SECRET_HEADER) or None
        with tempfile.SpooledTemporaryFile(max_size=8 * MiB) as body:
            await _receive_body(request, body, max_archive_bytes)
            status, created = await run_in_threadpool(host.submit, job_id, body, secret, train_wall_seconds)
        return JSONResponse(status.model_dump(mode="json"), status_code=202 if created else 200)

    @app.get("/jobs/{job_id}", dependencies=auth)
    def status(job_id: str, since: Annotated[int, Query(ge=0)] = 0) -> RunnerJobStatus:
        return host.status(job_id, since)

    @app.get("/jobs/{job_id}/logs", dependencies=auth)
    def logs(
        job_id: str,
        name: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=16 * MiB)] = MiB,
    ) -> Response:
        data, next_offset, size = host.read_log(job_id, name, offset, limit)
        headers = {NEXT_OFFSET_HEADER: str(next_offset), LOG_SIZE_HEADER: str(size)}
        return Response(data, media_type="application/octet-stream", headers=headers)

    @app.get("/jobs/{job_id}/result", dependencies=auth)
    def result(job_id: str) -> JobResult:
        return host.result(job_id)

    @app.get("/jobs/{job_id}/artifacts", dependencies=auth)
    def artifacts(job_id: str, include_weights: bool = False) -> FileResponse:
        path = host.artifacts_file(job_id, include_weights)
        return FileResponse(
            path,
            media_type="application/gzip",
            filename=f"{job_id}-result.tar.gz",
            background=BackgroundTask(path.unlink, missing_ok=True),
        )

    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (``port`` 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    app: FastAPI,
    sock: socket.socket,
    log_level: str = "info",
    access_log: bool = True,
) -> None:
    """Serve ``app`` on an already bound socket until SIGINT/SIGTERM."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def describe(host: JobHost, address: tuple[Any, ...]) -> str:
    """The startup line (never includes the token)."""
    url = f"http://{address[0]}:{address[1]}"
    return f"metatrain runner on {url} (device {host.device}, work dir {host.work_dir})"


def write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)
