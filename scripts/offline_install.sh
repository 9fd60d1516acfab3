#!/usr/bin/env bash
# Install a bundle made by scripts/offline_bundle.sh: check each piece against SHA256SUMS (when
# given), join them, and install every wheel into one folder, without an index.
#
#   bash scripts/offline_install.sh PIECES_DIR TARGET [SHA256SUMS]   # then PYTHONPATH=TARGET
set -euo pipefail
pieces=${1:?usage: offline_install.sh PIECES_DIR TARGET [SHA256SUMS]}
target=${2:?usage: offline_install.sh PIECES_DIR TARGET [SHA256SUMS]}
sums=${3:-}
PYTHON=${PYTHON:-python3}
files=$(find "$pieces" -name 'part[0-9]*' -type f | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2)
[[ -n "$files" ]] || { echo "no partNN files under $pieces" >&2; exit 2; }
if [[ -n "$sums" ]]; then
  expected=$(wc -l < "$sums")
  got=$(echo "$files" | wc -l)
  [[ "$got" == "$expected" ]] || { echo "$got pieces under $pieces, SHA256SUMS lists $expected" >&2; exit 2; }
  while read -r sum name; do
    path=$(echo "$files" | grep "/$name\$")
    [[ "$(sha256sum "$path" | cut -d' ' -f1)" == "$sum" ]] || { echo "$name: checksum mismatch" >&2; exit 2; }
  done < "$sums"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
cat $files | tar xf - -C "$work"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$target" "$work"/*.whl
echo "installed $(ls "$work"/*.whl | wc -l) wheels into $target"
