#!/usr/bin/env bash
# Baselines and learnability of the built-in families: freeze each family's baselines, run its
# reference episode, print the uplift table of docs/families.md.
#
#   BUDGET=full DEVICE=cuda bash scripts/families_study.sh      # the GPU study (one H200)
#   BUDGET=fast DEVICE=cpu SEED=0 bash scripts/families_study.sh # the CPU smoke study
#
# SEED=0 reuses the committed baselines; TRAIN_WALL caps each job's training (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-full}
DEVICE=${DEVICE:-cuda}
SEED=${SEED:-1}
TRAIN_WALL=${TRAIN_WALL:-600}
FAMILIES=${FAMILIES:-calc_chain multi_hop string_pipeline ledger dispatch triage}
RUNS=${RUNS:-runs/families-$BUDGET-$DEVICE}
MT=.venv/bin/metatrain

if [[ "$SEED" == 1 ]]; then
  for family in $FAMILIES; do
    "$MT" seed-baselines --family "$family" --budget "$BUDGET" --device "$DEVICE"
  done
fi
for family in $FAMILIES; do
  "$MT" episode --family "$family" --agent reference --provider local --budget "$BUDGET" \
    --device "$DEVICE" --runs "$RUNS" --train-wall-seconds "$TRAIN_WALL" --json "$RUNS/$family.json"
done
.venv/bin/python -m metatrain.analysis.uplift "$RUNS"/*/result.json | tee "$RUNS/uplift.md"
