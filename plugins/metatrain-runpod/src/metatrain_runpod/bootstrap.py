"""The pod bootstrap: one rendered script per pool, so every pod is a replica at pinned versions.

The script travels base64-encoded in the pod's environment (``METATRAIN_BOOTSTRAP``) and the
container command decodes and runs it: the SDK splices env values and docker args into its GraphQL
text unescaped, so neither may contain quotes, backslashes or newlines.
"""

from __future__ import annotations

import base64
import hashlib
import shlex

import attrs

from metatrain_runpod.config import PRIME_RL_MIN_GPUS, PoolConfig

BOOTSTRAP_ENV = "METATRAIN_BOOTSTRAP"
TOKEN_ENV = "METATRAIN_RUNNER_TOKEN"
SPEC_ENV = "METATRAIN_POD_SPEC"
WHEELS_DIR = "/opt/metatrain-wheels"
DOCKER_ARGS = (
    f"bash -c 'printenv {BOOTSTRAP_ENV} | base64 -d > /root/metatrain-bootstrap.sh "
    "&& exec bash /root/metatrain-bootstrap.sh'"
)
_UNSAFE = ('"', "\\", "\n", "\r")

_SCRIPT = """#!/usr/bin/env bash
# metatrain pod bootstrap (rendered from the pool config; identical on every pod of the pool)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PRIME_RL_DIR=/opt/prime-rl
if [ ! -d "$PRIME_RL_DIR/.git" ]; then
  git clone --quiet {repo} "$PRIME_RL_DIR"
fi
git -C "$PRIME_RL_DIR" fetch --quiet --tags origin || true
git -C "$PRIME_RL_DIR" checkout --quiet {commit}
test "$(git -C "$PRIME_RL_DIR" rev-parse HEAD | cut -c1-{n})" = {commit}
test "$(git -C "$PRIME_RL_DIR" rev-list -n 1 {tag} | cut -c1-{n})" = {commit}
python3 -m pip install --quiet uv
(cd "$PRIME_RL_DIR" && uv sync --quiet)
python3 -m venv /opt/metatrain-venv
/opt/metatrain-venv/bin/pip install --quiet {verifiers}
/opt/metatrain-venv/bin/pip install --quiet {packages}
/opt/metatrain-venv/bin/python - <<'CHECK'
from importlib.metadata import version
want = {want!r}
got = {{name: version(name) for name in want}}
bad = {{n: g for n, g in got.items() if g != want[n] and ("+" in want[n] or g.split("+")[0] != want[n])}}
assert not bad, f"version mismatch: want {{want}}, got {{got}}"
CHECK
{backend}
export METATRAIN_PRIME_RL_DIR="$PRIME_RL_DIR" METATRAIN_PRIME_RL_COMMIT={commit}
mkdir -p /workspace/metatrain-runner
exec /opt/metatrain-venv/bin/metatrain runner serve --host 0.0.0.0 --port {port} \\
  --token-env {token_env} --work-dir /workspace/metatrain-runner --device cuda --backend "$BACKEND"
"""

_AUTO_BACKEND = """# training backend: prime-rl needs {min_gpus} GPUs (1 inference + 1 trainer), trl one
GPUS="$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU ' || true)"
if [ "$GPUS" -lt 1 ]; then echo "metatrain bootstrap: nvidia-smi lists no GPU" >&2; exit 1; fi
if [ "$GPUS" -ge {min_gpus} ]; then BACKEND=prime-rl; else BACKEND=trl; fi"""


@attrs.frozen
class PodSpec:
    """What every pod of a pool is created with (minus its own token)."""

    script: str
    docker_args: str
    ports: str
    env: dict[str, str]

    @property
    def sha256(self) -> str:
        """Fingerprint of the rendered bootstrap: pods with another fingerprint are not replicas."""
        return hashlib.sha256(self.script.encode()).hexdigest()


def render_script(config: PoolConfig) -> str:
    pins = config.pins
    if pins.packages:
        packages = " ".join(shlex.quote(p) for p in pins.packages)
    else:
        wheels = [
            f"{name} @ file://{WHEELS_DIR}/{name.replace('-', '_')}-{pins.metatrain}-py3-none-any.whl"
            for name in ("metatrain", "metatrain-families")
        ]
        packages = " ".join(shlex.quote(w) for w in wheels)
    want = {k: v for k, v in pins.expected_versions().items() if k != "prime-rl"}
    return _SCRIPT.format(
        repo=shlex.quote(pins.prime_rl_repo),
        commit=shlex.quote(pins.prime_rl_commit),
        n=len(pins.prime_rl_commit),
        tag=shlex.quote(pins.prime_rl_tag),
        verifiers=shlex.quote(f"verifiers=={pins.verifiers}"),
        packages=packages,
        want=want,
        backend=backend_lines(config),
        port=config.runner_port,
        token_env=TOKEN_ENV,
    )


def backend_lines(config: PoolConfig) -> str:
    """Shell lines that set ``BACKEND`` for ``metatrain runner serve --backend``.

    ``auto``: chosen on the pod from its visible GPUs (the ladder may mix 1- and 2-GPU rungs, and one
    script serves the whole pool); otherwise the configured backend.
    """
    if config.backend == "auto":
        return _AUTO_BACKEND.format(min_gpus=PRIME_RL_MIN_GPUS)
    return f"BACKEND={shlex.quote(config.backend)}"


def pod_spec(config: PoolConfig) -> PodSpec:
    """Render the bootstrap, container command, ports and shared env for ``config``."""
    script = render_script(config)
    spec_sha = hashlib.sha256(script.encode()).hexdigest()
    env = {
        **config.extra_env,
        BOOTSTRAP_ENV: base64.b64encode(script.encode()).decode(),
        SPEC_ENV: spec_sha[:16],
    }
    check_graphql_safe(env)
    return PodSpec(script, DOCKER_ARGS, f"{config.runner_port}/{config.port_type}", env)


def runner_exports(script: str) -> dict[str, str]:
    """The literal ``NAME=value`` pairs the script ``export``s before it starts the runner (values with
    shell expansions left out): part of the runner's environment on a pod (the emulator applies them)."""
    exports: dict[str, str] = {}
    for line in script.splitlines():
        if line.startswith("export "):
            for token in shlex.split(line.removeprefix("export ")):
                name, sep, value = token.partition("=")
                if sep and "$" not in value:
                    exports[name] = value
    return exports


def check_graphql_safe(env: dict[str, str]) -> None:
    """Refuse env entries the SDK would splice into its query unescaped (quotes, backslashes, newlines)."""
    for key, value in env.items():
        if not key.replace("_", "").isalnum():
            raise ValueError(f"pod env name {key!r} must be letters, digits and underscores")
        if any(c in value for c in _UNSAFE):
            raise ValueError(f"pod env {key} contains a quote, backslash or newline (not sendable to Runpod)")
