#!/usr/bin/env bash
# Create .venv with metatrain, its built-in plugins and the dev tools (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first: 2.13.0 (CPU) is served from local disk on our machines; everything else from PyPI.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]" -e plugins/metatrain-families -e plugins/metatrain-reward \
  -e plugins/metatrain-runpod -e plugins/metatrain-tinker \
  -e examples/metatrain-example-family
touch .venv/.metatrain-installed
