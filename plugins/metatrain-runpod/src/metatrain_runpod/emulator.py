"""A local emulator of the part of Runpod's GraphQL API that the ``runpod`` SDK uses.

Point the real SDK at it with ``RUNPOD_API_BASE_URL=http://127.0.0.1:PORT``. It answers
``POST /graphql`` (key as ``Authorization: Bearer`` or ``?api_key=``) for ``gpuTypes``,
``myself { pods }``, ``pod``, ``podFindAndDeployOnDemand``, ``podTerminate`` and ``podStop``
with Runpod's JSON shapes and error messages. Every emulated pod is a real runner process on a
free loopback port, started with the environment given to ``create_pod`` plus what the pod
bootstrap exports (``METATRAIN_PRIME_RL_COMMIT``), and reported through ``runtime.ports``. The
process is ``metatrain runner serve --device cpu`` (the real ``run_job``; ``executor`` and
``backend`` select another), or ``runner_module`` (``METATRAIN_RUNPOD_EMULATOR_RUNNER``) instead.

Knobs (Python methods, or ``POST /_emulator/<knob>`` with a JSON body; ``GET /_emulator/state``):
GPU stock per type, injected API errors for the next N calls, killing a pod's process, a
provisioning delay, and pods that never leave provisioning.

Run standalone: ``python -m metatrain_runpod.emulator --port 8911``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import attrs

from metatrain_runpod.bootstrap import BOOTSTRAP_ENV, runner_exports
from metatrain_runpod.graphql_lite import Field, GraphQLFieldError, GraphQLSyntaxError, parse, project

OUT_OF_STOCK = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
SOMETHING_WRONG = "Something went wrong. Please try again later or contact support."
_POD_SCALARS = (
    "id name imageName dockerArgs dockerId env gpuCount costPerHr desiredStatus lastStatusChange machineId "
    "memoryInGb vcpuCount containerDiskInGb volumeInGb volumeMountPath podType port ports uptimeSeconds"
)
_GPU_SCALARS = (
    "id displayName memoryInGb maxGpuCount manufacturer cudaCores secureCloud communityCloud securePrice "
    "communityPrice oneMonthPrice threeMonthPrice oneWeekPrice communitySpotPrice secureSpotPrice"
)
SCHEMA: dict[str, dict[str, str | None]] = {
    "Query": {"gpuTypes": "GpuType", "myself": "User", "pod": "Pod"},
    "Mutation": {"podFindAndDeployOnDemand": "Pod", "podTerminate": None, "podStop": "Pod"},
    "User": {"id": None, "email": None, "pubKey": None, "networkVolumes": "NetworkVolume", "pods": "Pod"},
    "NetworkVolume": {"id": None, "name": None, "size": None, "dataCenterId": None},
    "Pod": {
        **dict.fromkeys(_POD_SCALARS.split()),
        "runtime": "PodRuntime",
        "machine": "PodMachineInfo",
    },
    "PodRuntime": {"uptimeInSeconds": None, "ports": "PodRuntimePorts", "gpus": "PodRuntimeGpus"},
    "PodRuntimePorts": dict.fromkeys(["ip", "isIpPublic", "privatePort", "publicPort", "type"]),
    "PodRuntimeGpus": dict.fromkeys(["id", "gpuUtilPercent"]),
    "PodMachineInfo": dict.fromkeys(["podHostId", "gpuDisplayName"]),
    "GpuType": {**dict.fromkeys(_GPU_SCALARS.split()), "lowestPrice": "LowestPrice"},
    "LowestPrice": dict.fromkeys(["minimumBidPrice", "uninterruptablePrice"]),
}
"""The slice of Runpod's GraphQL schema the emulator serves (what runpod 1.12.0 selects, and a bit more)."""

RUNNER_ENV = "METATRAIN_RUNPOD_EMULATOR_RUNNER"
"""Module run as each pod's process instead of ``metatrain.cli.app runner serve`` (tests: a fake executor)."""


@attrs.define
class GpuType:
    id: str
    display_name: str
    memory_gb: int
    secure_price: float
    community_price: float
    stock: int = 8
    """GPUs free right now (a pod takes ``gpuCount`` of them)."""

    def as_graphql(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "displayName": self.display_name,
            "memoryInGb": self.memory_gb,
            "maxGpuCount": 8,
            "manufacturer": "Nvidia",
            "cudaCores": 0,
            "secureCloud": True,
            "communityCloud": self.community_price > 0,
            "securePrice": self.secure_price,
            "communityPrice": self.community_price,
            "oneMonthPrice": None,
            "threeMonthPrice": None,
            "oneWeekPrice": None,
            "communitySpotPrice": None,
            "secureSpotPrice": None,
            "lowestPrice": {"minimumBidPrice": None, "uninterruptablePrice": self.secure_price},
        }


def default_gpu_types() -> list[GpuType]:
    """An emulated catalogue with on-demand prices of the order Runpod lists (USD/h per GPU)."""
    return [
        GpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.69, 0.0),
        GpuType("NVIDIA H200", "H200 SXM", 141, 3.59, 0.0),
        GpuType("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.49, 1.39),
        GpuType("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.64, 1.19),
        GpuType("NVIDIA L40S", "L40S", 48, 0.86, 0.79),
        GpuType("NVIDIA RTX A6000", "RTX A6000", 48, 0.49, 0.33),
    ]


@attrs.define
class EmulatedPod:
    id: str
    name: str
    gpu: GpuType
    gpu_count: int
    cost_per_hr: float
    image_name: str
    docker_args: str
    ports: str
    env: dict[str, str] = attrs.field(repr=False)
    container_disk_gb: int
    volume_gb: int
    created_at: float
    desired_status: str = "RUNNING"
    process: subprocess.Popen[bytes] | None = None
    public_port: int | None = None
    started_at: float | None = None
    timer: threading.Timer | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def runtime(self) -> dict[str, Any] | None:
        if not self.alive() or self.started_at is None:
            return None
        private = int(self.ports.split("/")[0]) if self.ports else 8000
        return {
            "uptimeInSeconds": int(time.time() - self.started_at),
            "ports": [
                {
                    "ip": "127.0.0.1",
                    "isIpPublic": True,
                    "privatePort": private,
                    "publicPort": self.public_port,
                    "type": "tcp",
                }
            ],
            "gpus": [{"id": f"gpu-{i}", "gpuUtilPercent": 0} for i in range(self.gpu_count)],
        }

    def as_graphql(self) -> dict[str, Any]:
        running = self.alive()
        return {
            "id": self.id,
            "name": self.name,
            "imageName": self.image_name,
            "dockerArgs": self.docker_args,
            "dockerId": None,
            "env": [f"{k}={v}" for k, v in self.env.items()],
            "gpuCount": self.gpu_count,
            "costPerHr": self.cost_per_hr,
            "desiredStatus": self.desired_status,
            "lastStatusChange": f"Rented by User: {datetime.fromtimestamp(self.created_at, UTC)}",
            "machineId": f"m-{self.id[:8]}",
            "machine": {"podHostId": f"{self.id}-64410f3a", "gpuDisplayName": self.gpu.display_name},
            "memoryInGb": 62 * self.gpu_count,
            "vcpuCount": 8 * self.gpu_count,
            "containerDiskInGb": self.container_disk_gb,
            "volumeInGb": self.volume_gb,
            "volumeMountPath": "/workspace",
            "podType": "RESERVED",
            "port": None,
            "ports": self.ports,
            "uptimeSeconds": int(time.time() - self.started_at) if running and self.started_at else 0,
            "runtime": self.runtime(),
        }


class ApiError(Exception):
    """A resolver error, answered as a GraphQL error."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pod_id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(14))


@attrs.define
class Emulator:
    """Emulated Runpod account state; ``start()`` serves it on loopback."""

    api_key: str = attrs.field(default="emulator-key", repr=False)
    root: Path = attrs.field(factory=lambda: Path(tempfile.mkdtemp(prefix="runpod-emulator-")))
    gpu_types: dict[str, GpuType] = attrs.field(factory=lambda: {g.id: g for g in default_gpu_types()})
    runner_module: str | None = attrs.field(factory=lambda: os.environ.get(RUNNER_ENV) or None)
    executor: str | None = None
    """With the default runner (``metatrain runner serve``): its ``--executor MODULE:FUNCTION``; None keeps
    the real ``run_job`` (pre-eval, sandboxed TRL training on CPU, post-eval)."""
    backend: str = "trl"
    """``--backend`` of the default runner (emulated pods have no GPUs, whatever the bootstrap would pick)."""
    extra_pod_env: dict[str, str] = attrs.field(factory=dict)
    """Added to every pod process's environment (test knobs for the fake executor)."""
    provision_delay_s: float = 0.0
    stuck_next: int = 0
    """The next N created pods never start (stuck provisioning)."""
    pods: dict[str, EmulatedPod] = attrs.field(factory=dict)
    terminated: list[str] = attrs.field(factory=list)
    deployments: list[tuple[str, str]] = attrs.field(factory=list)
    """Every deploy request: (gpuTypeId, the new pod's id or the error)."""
    calls: list[str] = attrs.field(factory=list)
    _errors: list[tuple[str, str | None]] = attrs.field(factory=list)
    _lock: threading.RLock = attrs.field(factory=threading.RLock)
    _server: ThreadingHTTPServer | None = None

    # ----------------------------------------------------------------- knobs
    def set_stock(self, gpu_type_id: str, count: int) -> None:
        with self._lock:
            self.gpu_types[gpu_type_id].stock = count

    def inject_errors(self, count: int, kind: str = "http500", only: str | None = None) -> None:
        """Fail the next ``count`` calls (``only``: calls to that root field) with ``kind``:
        ``http500`` (JSON errors), ``http502`` (an HTML gateway page) or ``graphql`` (200 + errors)."""
        if kind not in ("http500", "http502", "graphql"):
            raise ValueError(f"unknown error kind {kind!r}")
        with self._lock:
            self._errors.extend([(kind, only)] * count)

    def kill_pod(self, pod_id: str) -> None:
        """Kill the pod's process (the machine died); the pod reports EXITED and no runtime."""
        with self._lock:
            pod = self.pods[pod_id]
            self._stop_process(pod)
            pod.desired_status = "EXITED"

    def live_pods(self) -> list[str]:
        """Ids of pods that exist (not terminated), whatever their process state."""
        with self._lock:
            return sorted(self.pods)

    def snapshot(self) -> dict[str, Any]:
        """Account state without secrets (no env values)."""
        with self._lock:
            return {
                "pods": [
                    {
                        "id": p.id,
                        "name": p.name,
                        "gpu": p.gpu.id,
                        "desiredStatus": p.desired_status,
                        "alive": p.alive(),
                        "port": p.public_port,
                        "costPerHr": p.cost_per_hr,
                    }
                    for p in self.pods.values()
                ],
                "terminated": list(self.terminated),
                "deployments": [list(d) for d in self.deployments],
                "stock": {g.id: g.stock for g in self.gpu_types.values()},
                "calls": list(self.calls),
            }

    # ----------------------------------------------------------------- server
    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 in a daemon thread; returns the base URL for RUNPOD_API_BASE_URL."""
        handler = type("Handler", (_Handler,), {"emulator": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.base_url

    @property
    def base_url(self) -> str:
        assert self._server is not None, "emulator not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        """Stop serving and kill every pod process (the account's pods vanish with the emulator)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            for pod in self.pods.values():
                self._stop_process(pod)

    # ----------------------------------------------------------------- GraphQL
    def execute(self, query: str) -> tuple[int, dict[str, Any]]:
        """Run one GraphQL document; returns (HTTP status, JSON body)."""
        try:
            op = parse(query)
        except GraphQLSyntaxError as exc:
            return 400, {"errors": [{"message": str(exc), "extensions": {"code": "GRAPHQL_PARSE_FAILED"}}]}
        with self._lock:
            self.calls.extend(f.name for f in op.fields)
            injected = self._take_error([f.name for f in op.fields])
        if injected == "http500":
            return 500, {
                "errors": [{"message": SOMETHING_WRONG, "extensions": {"code": "INTERNAL_SERVER_ERROR"}}]
            }
        if injected == "http502":
            return 502, {"_html": "<html><body>error code: 502</body></html>"}
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        for f in op.fields:
            try:
                if injected == "graphql":
                    raise ApiError(SOMETHING_WRONG)
                data[f.name] = self._resolve(op.kind, f)
            except (ApiError, GraphQLFieldError) as exc:
                data[f.name] = None
                errors.append({"message": str(exc), "path": [f.name], "extensions": {"code": "RUNPOD"}})
        return 200, ({"errors": errors, "data": data} if errors else {"data": data})

    def _take_error(self, roots: list[str]) -> str | None:
        for i, (kind, only) in enumerate(self._errors):
            if only is None or only in roots:
                del self._errors[i]
                return kind
        return None

    def _resolve(self, kind: str, f: Field) -> Any:
        root = "Query" if kind == "query" else "Mutation"
        if f.name not in SCHEMA[root]:
            raise GraphQLFieldError(f'Cannot query field "{f.name}" on type "{root}".')
        rtype = SCHEMA[root][f.name]
        if rtype is not None:
            project(None, f.selections, rtype, SCHEMA)  # reject bad selections before acting
        with self._lock:
            value = self._value(f.name, f.args.get("input") or {})
        return value if rtype is None else project(value, f.selections, rtype, SCHEMA)

    def _value(self, name: str, args: dict[str, Any]) -> Any:
        if name == "gpuTypes":
            return [g.as_graphql() for g in self.gpu_types.values() if args.get("id") in (None, g.id)]
        if name == "myself":
            pods = [p.as_graphql() for p in self.pods.values()]
            return {
                "id": "user-emulated",
                "email": "user@example.com",
                "pubKey": "",
                "networkVolumes": [],
                "pods": pods,
            }
        if name == "podFindAndDeployOnDemand":
            return self._deploy(args).as_graphql()
        pod = self.pods.get(str(args.get("podId")))
        if name == "pod":
            return None if pod is None else pod.as_graphql()
        if pod is None:
            raise ApiError("Pod not found")
        if name == "podTerminate":
            self._terminate(pod.id)
            return None
        self._stop_process(pod)  # podStop: the container stops; a volume would keep billing
        pod.desired_status = "EXITED"
        return pod.as_graphql()

    def _deploy(self, spec: dict[str, Any]) -> EmulatedPod:
        gpu = self.gpu_types.get(str(spec.get("gpuTypeId")))
        if gpu is None:
            raise ApiError("Invalid GPU type")
        count = int(spec.get("gpuCount") or 1)
        if gpu.stock < count:
            self.deployments.append((gpu.id, OUT_OF_STOCK))
            raise ApiError(OUT_OF_STOCK)
        gpu.stock -= count
        cloud = str(spec.get("cloudType", "ALL"))
        price = (
            gpu.community_price if cloud.endswith("COMMUNITY") and gpu.community_price else gpu.secure_price
        )
        env = {str(e["key"]): str(e["value"]) for e in spec.get("env") or []}
        pod = EmulatedPod(
            id=_pod_id(),
            name=str(spec.get("name", "")),
            gpu=gpu,
            gpu_count=count,
            cost_per_hr=round(price * count, 4),
            image_name=str(spec.get("imageName", "")),
            docker_args=str(spec.get("dockerArgs", "")),
            ports=str(spec.get("ports") or "8000/http"),
            env=env,
            container_disk_gb=int(spec.get("containerDiskInGb") or 0),
            volume_gb=int(spec.get("volumeInGb") or 0),
            created_at=time.time(),
        )
        self.pods[pod.id] = pod
        self.deployments.append((gpu.id, pod.id))
        if self.stuck_next > 0:
            self.stuck_next -= 1
        else:
            pod.timer = threading.Timer(self.provision_delay_s, self._launch, args=(pod.id,))
            pod.timer.daemon = True
            pod.timer.start()
        return pod

    def _launch(self, pod_id: str) -> None:
        with self._lock:
            pod = self.pods.get(pod_id)
            if pod is None or pod.desired_status != "RUNNING":
                return
            work = self.root / "pods" / pod.id
            work.mkdir(parents=True, exist_ok=True)
            port = _free_port()
            base = {
                k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH") if k in os.environ
            }
            exports: dict[str, str] = {}
            with contextlib.suppress(ValueError):  # no or no valid bootstrap: nothing exported
                exports = runner_exports(base64.b64decode(pod.env.get(BOOTSTRAP_ENV, "")).decode())
            env = {**base, **pod.env, **exports, **self.extra_pod_env, "RUNPOD_POD_ID": pod.id}
            log = (work / "pod.log").open("ab")
            pod.process = subprocess.Popen(
                self._runner_command(port, work / "runner"),
                env=env,
                cwd=work,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            log.close()
            pod.public_port = port
            pod.started_at = time.time()

    def _runner_command(self, port: int, work_dir: Path) -> list[str]:
        """The pod's process: what the bootstrap execs, minus the installation, on CPU."""
        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--token-env", "METATRAIN_RUNNER_TOKEN"]
        args += ["--work-dir", str(work_dir), "--device", "cpu"]
        if self.runner_module:
            return [sys.executable, "-m", self.runner_module, *args]
        args += ["--backend", self.backend]
        if self.executor:
            args += ["--executor", self.executor]
        return [sys.executable, "-m", "metatrain.cli.app", "runner", *args]

    def _terminate(self, pod_id: str) -> None:
        pod = self.pods.pop(pod_id)
        self._stop_process(pod)
        pod.desired_status = "TERMINATED"
        pod.gpu.stock += pod.gpu_count
        self.terminated.append(pod_id)

    @staticmethod
    def _stop_process(pod: EmulatedPod) -> None:
        if pod.timer is not None:
            pod.timer.cancel()
        if pod.process is not None and pod.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGKILL)
            pod.process.wait()

    # ----------------------------------------------------------------- admin
    def admin(self, knob: str, body: dict[str, Any]) -> dict[str, Any]:
        """Apply one knob from ``POST /_emulator/<knob>``."""
        if knob == "stock":
            self.set_stock(str(body["gpu_type_id"]), int(body["count"]))
        elif knob == "errors":
            self.inject_errors(int(body["count"]), str(body.get("kind", "http500")), body.get("only"))
        elif knob == "kill":
            self.kill_pod(str(body["pod_id"]))
        elif knob == "config":
            with self._lock:
                self.provision_delay_s = float(body.get("provision_delay_s", self.provision_delay_s))
                self.stuck_next = int(body.get("stuck_next", self.stuck_next))
        else:
            raise KeyError(knob)
        return self.snapshot()


class _Handler(BaseHTTPRequestHandler):
    emulator: Emulator
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request lines carry ?api_key=...: never log them

    def _send(self, status: int, body: dict[str, Any]) -> None:
        if "_html" in body:
            raw, ctype = str(body["_html"]).encode(), "text/html"
        else:
            raw, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        data = json.loads(self.rfile.read(length) or b"{}")
        return data if isinstance(data, dict) else {}

    def _authorised(self) -> bool:
        url = urlparse(self.path)
        keys = parse_qs(url.query).get("api_key", [])
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            keys.append(auth.removeprefix("Bearer "))
        return any(secrets.compare_digest(k, self.emulator.api_key) for k in keys)

    def do_GET(self) -> None:
        if urlparse(self.path).path == "/_emulator/state":
            self._send(200, self.emulator.snapshot())
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        path = urlparse(self.path).path
        try:
            body = self._body()
        except json.JSONDecodeError:
            self._send(400, {"errors": [{"message": "POST body is not JSON"}]})
            return
        if path.startswith("/_emulator/"):
            try:
                self._send(200, self.emulator.admin(path.removeprefix("/_emulator/"), body))
            except (KeyError, ValueError, TypeError) as exc:
                self._send(400, {"error": f"bad knob request: {exc}"})
            return
        if path != "/graphql":
            self._send(404, {"error": "not found"})
            return
        if not self._authorised():
            self._send(401, {"error": "Unauthorized"})
            return
        status, out = self.emulator.execute(str(body.get("query", "")))
        self._send(status, out)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Emulate Runpod's GraphQL API on loopback")
    parser.add_argument("--port", type=int, default=8911)
    parser.add_argument("--api-key", default=os.environ.get("RUNPOD_EMULATOR_API_KEY", "emulator-key"))
    parser.add_argument("--root", type=Path, default=None, help="Where pod work dirs go")
    parser.add_argument("--provision-delay", type=float, default=0.0)
    parser.add_argument(
        "--runner-executor", default=None, help="Pods' runner --executor MODULE:FUNCTION (default: run_job)"
    )
    args = parser.parse_args(argv)
    emu = Emulator(
        api_key=args.api_key, provision_delay_s=args.provision_delay, executor=args.runner_executor
    )
    if args.root is not None:
        emu.root = args.root
    url = emu.start(args.port)
    print(f"Runpod emulator on {url} (RUNPOD_API_BASE_URL={url})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        emu.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
