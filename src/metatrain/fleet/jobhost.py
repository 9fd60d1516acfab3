"""The runner's job host: verified bundles run one at a time, their state kept in a work directory.

``fleet/service.py`` serves a ``JobHost`` over HTTP (docs/gpu-runner-spec.md). Work directory::

    runner.lock               held (flock) while a runner serves this directory
    incoming/<uuid>/          uploads being unpacked and verified
    jobs/<job_id>/bundle/     the verified job bundle
    jobs/<job_id>/result/     the runner's result directory (result.json, logs/, train/, ...)
    jobs/<job_id>/state.json  RunnerJobStatus (last events), rewritten atomically on every change
    tmp/                      artifact archives being sent

The eval secret arrives with the submission, lives in memory for the job's duration, and goes only
into the eval processes' environment (``run_job(eval_env=...)``): never to disk, logs or training.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import traceback
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any, Protocol

import attrs

import metatrain
from metatrain.fleet.archive import BUNDLE_TOP, ArchiveError, member_path, pack_dir, unpack
from metatrain.fleet.versions import runner_versions
from metatrain.jobs.result import result_fields
from metatrain.protocols import ProgressFn
from metatrain.specs import BundleManifest, JobResult, ProgressEvent, RunnerHealth, RunnerJobStatus
from metatrain.specs.runner_api import TERMINAL_STATES

if TYPE_CHECKING:
    from metatrain.jobs.runner import Backend

MiB = 1024**2
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
LOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
EVAL_SECRET_ENV = "METATRAIN_EVAL_SECRET"


class JobExecutor(Protocol):
    """``metatrain.jobs.runner.run_job``'s signature; tests inject fakes."""

    def __call__(
        self,
        bundle_dir: Path,
        result_dir: Path,
        device: str = "cpu",
        progress: ProgressFn | None = None,
        train_wall_seconds: float | None = None,
        eval_env: Mapping[str, str] | None = None,
    ) -> JobResult: ...


def runner_executor(backend: Backend = "trl") -> JobExecutor:
    """The real runner with a training/eval backend: ``trl`` (local, sandboxed) or ``prime-rl`` (pods).

    ``run_job`` is imported lazily, on the first job: it pulls in the sandbox and, later, torch.
    """

    def run(
        bundle_dir: Path,
        result_dir: Path,
        device: str = "cpu",
        progress: ProgressFn | None = None,
        train_wall_seconds: float | None = None,
        eval_env: Mapping[str, str] | None = None,
    ) -> JobResult:
        from metatrain.jobs.runner import run_job

        return run_job(
            bundle_dir, result_dir, device, progress, train_wall_seconds, eval_env, backend=backend
        )

    return run


default_executor: JobExecutor = runner_executor()
"""The real runner with the ``trl`` backend."""


class JobHostError(Exception):
    """A request the host refuses; ``status_code`` is the HTTP status it maps to."""

    status_code = 400


class BadRequest(JobHostError):
    status_code = 400


class JobNotFound(JobHostError):
    status_code = 404


class JobConflict(JobHostError):
    status_code = 409


class RangeNotSatisfiable(JobHostError):
    status_code = 416


def _now() -> datetime:
    return datetime.now().astimezone()


def bundle_digest(bundle_json: bytes) -> str:
    """The idempotency key of a bundle: sha256 of its ``bundle.json`` as canonical JSON.

    ``bundle.json`` lists the sha256 of every bundle file and the host refuses files it does not
    list, so this digest identifies the whole bundle.
    """
    canonical = json.dumps(json.loads(bundle_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def verify_bundle(bundle: Path, job_id: str, files: list[PurePosixPath]) -> BundleManifest:
    """Load and verify an unpacked bundle: hashes, listed files only, and the expected job id."""
    from metatrain.jobs.bundle import load_bundle

    if not (bundle / "bundle.json").is_file():
        raise BadRequest("the archive has no bundle.json at its root")
    try:
        manifest = BundleManifest.model_validate_json((bundle / "bundle.json").read_bytes())
    except ValueError as exc:
        raise BadRequest(f"bundle.json is not a valid BundleManifest: {exc}") from exc
    for rel in manifest.files:
        try:
            path = member_path(rel)
        except ArchiveError as exc:
            raise BadRequest(f"bundle.json lists an unsafe path: {exc}") from exc
        if path is None or path.parts[0] != "workspace" or str(path) != rel:
            raise BadRequest(f"bundle.json lists {rel!r}, which is not a plain path under workspace/")
    extra = sorted({str(f) for f in files} - set(manifest.files) - {"bundle.json"})
    if extra:
        raise BadRequest(f"the archive holds files bundle.json does not list: {extra[:5]}")
    try:
        load_bundle(bundle)
    except ValueError as exc:
        raise BadRequest(f"bundle verification failed: {exc}") from exc
    if manifest.job_id != job_id:
        raise BadRequest(f"the bundle is for job {manifest.job_id!r}, not {job_id!r}")
    return manifest


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _write_result(result_dir: Path, result: JobResult) -> None:
    result_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(result_dir / "result.json", result.model_dump_json(indent=2))


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(data, default=str)))


@attrs.define
class JobHost:
    """Runs submitted bundles one at a time with ``run`` and keeps their state under ``work_dir``."""

    work_dir: Path
    device: str = "cpu"
    run: JobExecutor = default_executor
    max_events: int = 200
    max_bundle_bytes: int = 256 * MiB
    versions: dict[str, str] = attrs.field(factory=runner_versions)
    """Reported in /health; read once, when the host is built (installed packages do not change under it)."""
    _jobs: dict[str, RunnerJobStatus] = attrs.field(factory=dict, init=False)
    _active: str | None = attrs.field(default=None, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _lock_fh: IO[str] | None = attrs.field(default=None, init=False)
    _threads: dict[str, threading.Thread] = attrs.field(factory=dict, init=False)

    # -- lifecycle --------------------------------------------------------------------------------

    def open(self) -> JobHost:
        """Take the work directory (one runner per directory) and reload job states from it.

        A job that was queued or running when the previous runner process stopped is recorded
        ``died``; finished jobs are served again as they were.
        """
        self.work_dir.mkdir(parents=True, exist_ok=True)
        fh = (self.work_dir / "runner.lock").open("a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise RuntimeError(f"another runner is serving work dir {self.work_dir}") from None
        self._lock_fh = fh
        for name in ("incoming", "tmp"):
            shutil.rmtree(self.work_dir / name, ignore_errors=True)
            (self.work_dir / name).mkdir()
        (self.work_dir / "jobs").mkdir(exist_ok=True)
        for job_dir in sorted((self.work_dir / "jobs").iterdir()):
            self._recover(job_dir)
        return self

    def close(self) -> None:
        """Release the work directory (a job still running is reported ``died`` by the next runner)."""
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    def _recover(self, job_dir: Path) -> None:
        try:
            status = RunnerJobStatus.model_validate_json((job_dir / "state.json").read_text())
        except (OSError, ValueError):  # unreadable state: keep the id taken, report the job as died
            try:
                digest = bundle_digest((job_dir / "bundle" / "bundle.json").read_bytes())
            except (OSError, ValueError):
                digest = "unknown"
            status = RunnerJobStatus(
                job_id=job_dir.name, state="running", bundle_sha256=digest, submitted_at=_now()
            )
        if status.state not in TERMINAL_STATES:
            result = self._load_result(job_dir) or self._died_result(
                job_dir,
                f"the runner process stopped while the job was {status.state}"
                + (f" (phase {status.phase})" if status.phase else ""),
            )
            status = status.model_copy(
                update={"state": result.status, "error": result.error, "finished_at": _now()}
            )
            _write_atomic(job_dir / "state.json", status.model_dump_json(indent=2))
        self._jobs[status.job_id] = status

    @staticmethod
    def _load_result(job_dir: Path) -> JobResult | None:
        path = job_dir / "result" / "result.json"
        return JobResult.model_validate_json(path.read_text()) if path.is_file() else None

    def _died_result(self, job_dir: Path, error: str) -> JobResult:
        try:
            manifest = BundleManifest.model_validate_json((job_dir / "bundle" / "bundle.json").read_text())
            fields = result_fields(manifest, self.device)
        except (OSError, ValueError):
            fields = {"model": "?", "device": self.device, "eval_n": 0}
        result = JobResult(**{**fields, "job_id": job_dir.name, "status": "died", "error": error})
        _write_result(job_dir / "result", result)
        return result

    # -- queries ----------------------------------------------------------------------------------

    def health(self) -> RunnerHealth:
        active = self._active
        return RunnerHealth(
            version=metatrain.__version__,
            versions=dict(self.versions),
            device=self.device,
            busy=active is not None,
            job_id=active,
        )

    def _job_dir(self, job_id: str) -> Path:
        if not JOB_ID.match(job_id):
            raise BadRequest(f"invalid job id {job_id!r}: use 1-200 of [A-Za-z0-9._-], starting alphanumeric")
        return self.work_dir / "jobs" / job_id

    def _state(self, job_id: str) -> RunnerJobStatus:
        self._job_dir(job_id)
        with self._lock:
            status = self._jobs.get(job_id)
        if status is None:
            raise JobNotFound(f"no job {job_id!r} on this runner")
        return status

    def status(self, job_id: str, since: int = 0) -> RunnerJobStatus:
        """The job's status with its retained progress events numbered ``since`` or later."""
        status = self._state(job_id)
        return status.model_copy(update={"events": [e for e in status.events if e.seq >= since]})

    def result(self, job_id: str) -> JobResult:
        """The finished job's ``JobResult``; ``JobConflict`` while it is queued or running."""
        status = self._state(job_id)
        if not status.done:
            raise JobConflict(f"job {job_id!r} is {status.state}; its result is not ready")
        result = self._load_result(self._job_dir(job_id))
        if result is None:
            raise JobNotFound(f"job {job_id!r} finished without result.json")
        return result

    def read_log(self, job_id: str, name: str, offset: int, limit: int) -> tuple[bytes, int, int]:
        """Up to ``limit`` bytes of ``result/logs/NAME`` from ``offset``: (data, next offset, log size).

        A log not written yet reads as empty while the job is unfinished.
        """
        status = self._state(job_id)
        if not LOG_NAME.match(name):
            raise BadRequest(f"invalid log name {name!r}")
        logs = self._job_dir(job_id) / "result" / "logs"
        path = logs / name
        if not path.is_file():
            if status.done:
                have = sorted(p.name for p in logs.glob("*") if p.is_file()) if logs.is_dir() else []
                raise JobNotFound(f"job {job_id!r} has no log {name!r}; it has {have}")
            if offset:
                raise RangeNotSatisfiable(f"offset {offset} is past the end of {name} (not written yet)")
            return b"", 0, 0
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if offset > size:
                raise RangeNotSatisfiable(f"offset {offset} is past the end of {name} ({size} bytes)")
            fh.seek(offset)
            data = fh.read(limit)
        return data, offset + len(data), size

    def write_artifacts(self, job_id: str, out: IO[bytes], include_weights: bool) -> int:
        """The result directory as tar.gz into ``out`` (``train/model/`` only with ``include_weights``)."""
        self.result(job_id)

        def keep(rel: PurePosixPath) -> bool:
            return include_weights or rel.parts[:2] != ("train", "model")

        return pack_dir(self._job_dir(job_id) / "result", out, keep)

    def artifacts_file(self, job_id: str, include_weights: bool) -> Path:
        """``write_artifacts`` into a temporary file under ``tmp/`` (the caller deletes it)."""
        fd, name = tempfile.mkstemp(dir=self.work_dir / "tmp", suffix=".tar.gz")
        try:
            with os.fdopen(fd, "wb") as fh:
                self.write_artifacts(job_id, fh, include_weights)
        except BaseException:
            os.unlink(name)
            raise
        return Path(name)

    # -- submission -------------------------------------------------------------------------------

    def submit(
        self,
        job_id: str,
        archive: IO[bytes],
        eval_secret: str | None = None,
        train_wall_seconds: float | None = None,
    ) -> tuple[RunnerJobStatus, bool]:
        """Verify and start a bundle archive; returns (status, created).

        Idempotent: the same job id with the same bundle returns the existing job (created False)
        and never runs it again; a different bundle under a known id, or any new job while another
        is queued or running, raises ``JobConflict``.
        """
        job_dir = self._job_dir(job_id)
        staging = self.work_dir / "incoming" / uuid.uuid4().hex
        try:
            try:
                files = unpack(
                    archive, staging / "bundle", max_bytes=self.max_bundle_bytes, allowed_top=BUNDLE_TOP
                )
            except ArchiveError as exc:
                raise BadRequest(f"rejected bundle archive: {exc}") from exc
            manifest = verify_bundle(staging / "bundle", job_id, files)
            digest = bundle_digest((staging / "bundle" / "bundle.json").read_bytes())
            with self._lock:
                existing = self._jobs.get(job_id)
                if existing is not None:
                    if existing.bundle_sha256 != digest:
                        raise JobConflict(
                            f"job {job_id!r} already exists on this runner with a different bundle "
                            f"(sha256 {existing.bundle_sha256[:12]}…, this one {digest[:12]}…)"
                        )
                    return existing.model_copy(update={"events": []}), False
                if self._active is not None:
                    raise JobConflict(
                        f"runner is busy with job {self._active!r}; it runs one job at a time "
                        f"(submit {job_id!r} to another runner or after that job finishes)"
                    )
                status = RunnerJobStatus(
                    job_id=job_id, state="queued", bundle_sha256=digest, submitted_at=_now()
                )
                (staging / "state.json").write_text(status.model_dump_json(indent=2))
                os.rename(staging, job_dir)
                self._jobs[job_id] = status
                self._active = job_id
            eval_env = {EVAL_SECRET_ENV: eval_secret} if eval_secret else None
            thread = threading.Thread(
                target=self._execute,
                args=(job_id, manifest, eval_env, train_wall_seconds),
                name=f"job-{job_id}",
                daemon=True,
            )
            self._threads[job_id] = thread
            thread.start()
            return status, True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def join(self, job_id: str, timeout: float | None = None) -> None:
        """Wait for a job started by this process to finish (tests, shutdown)."""
        thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)

    # -- execution --------------------------------------------------------------------------------

    def _save(self, job_id: str, **update: Any) -> None:
        """Update a job's status (the caller holds the lock) and persist it."""
        status = self._jobs[job_id].model_copy(update=update)
        self._jobs[job_id] = status
        _write_atomic(self.work_dir / "jobs" / job_id / "state.json", status.model_dump_json(indent=2))

    def _progress(self, job_id: str) -> ProgressFn:
        def progress(event: str, data: dict[str, Any]) -> None:
            with self._lock:
                status = self._jobs[job_id]
                item = ProgressEvent(seq=status.events_total, event=event, data=_jsonable(data), at=_now())
                update: dict[str, Any] = {
                    "events": [*status.events, item][-self.max_events :],
                    "events_total": status.events_total + 1,
                }
                if event == "phase" and isinstance(data.get("name"), str):
                    update["phase"] = data["name"]
                self._save(job_id, **update)

        return progress

    def _execute(
        self,
        job_id: str,
        manifest: BundleManifest,
        eval_env: dict[str, str] | None,
        train_wall_seconds: float | None,
    ) -> None:
        job_dir = self.work_dir / "jobs" / job_id
        result_dir = job_dir / "result"
        try:
            with self._lock:
                self._save(job_id, state="running", started_at=_now())
            result = self.run(
                job_dir / "bundle",
                result_dir,
                device=self.device,
                progress=self._progress(job_id),
                train_wall_seconds=train_wall_seconds,
                eval_env=eval_env,
            )
        except Exception as exc:
            result = JobResult(
                **result_fields(manifest, self.device),
                status="died",
                error=f"runner crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}",
            )
        finally:
            eval_env = None
        _write_result(result_dir, result)
        with self._lock:
            self._save(job_id, state=result.status, error=result.error, finished_at=_now())
            self._active = None
