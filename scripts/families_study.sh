#!/usr/bin/env bash
# Baselines and learnability of the built-in families: freeze each family's baselines, run its
# reference episode, print the uplift table of docs/families.md.
#
#   BUDGET=full DEVICE=cuda PARALLEL=6 bash scripts/families_study.sh  # the GPU study (one H200)
#   BUDGET=fast DEVICE=cpu SEED=0 bash scripts/families_study.sh        # the CPU smoke study
#
# SEED=0 reuses the committed baselines; TRAIN_WALL caps each job's training (seconds);
# PARALLEL runs that many seedings and episodes at once (one GPU can hold several small jobs);
# AGENT=reference:KEY=VALUE,... runs an ablation of the reference jobs (docs/agents.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-full}
DEVICE=${DEVICE:-cuda}
SEED=${SEED:-1}
TRAIN_WALL=${TRAIN_WALL:-600}
PARALLEL=${PARALLEL:-1}
FAMILIES=${FAMILIES:-calc_chain multi_hop string_pipeline ledger dispatch triage}
RUNS=${RUNS:-runs/families-$BUDGET-$DEVICE}
MT=${MT:-.venv/bin/metatrain}
AGENT=${AGENT:-reference}
export MT BUDGET DEVICE RUNS TRAIN_WALL AGENT
mkdir -p "$RUNS"

if [[ "$SEED" == 1 ]]; then
  # One process per family; the baselines file is locked while a model's entry is written.
  printf '%s\n' $FAMILIES | xargs -P "$PARALLEL" -I{} \
    sh -c '"$MT" seed-baselines --family {} --budget "$BUDGET" --device "$DEVICE" > "$RUNS/seed-{}.log" 2>&1 \
      || { echo "seeding {} failed: see $RUNS/seed-{}.log"; exit 1; }'
fi
printf '%s\n' $FAMILIES | xargs -P "$PARALLEL" -I{} \
  sh -c '"$MT" episode --family {} --agent "$AGENT" --provider local --budget "$BUDGET" \
    --device "$DEVICE" --runs "$RUNS/{}" --train-wall-seconds "$TRAIN_WALL" --json "$RUNS/{}.json" \
    > "$RUNS/episode-{}.log" 2>&1; echo "{}: episode exit $? (log: $RUNS/episode-{}.log)"'
.venv/bin/python -m metatrain.analysis.uplift "$RUNS"/*/*/result.json | tee "$RUNS/uplift.md"
