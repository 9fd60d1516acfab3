#!/usr/bin/env bash
# Baselines and learnability of the built-in families: freeze each family's baselines, run its
# reference episode, print the uplift table of docs/families.md.
#
#   BUDGET=full DEVICE=cuda PARALLEL=6 bash scripts/families_study.sh  # the GPU study (one H200)
#   BUDGET=fast DEVICE=cpu SEED=0 bash scripts/families_study.sh        # the CPU smoke study
#
# SEED=0 reuses the committed baselines; TRAIN_WALL caps each job's training (seconds);
# PARALLEL runs that many seedings and episodes at once (one GPU can hold several small jobs);
# AGENT=reference:KEY=VALUE,... runs an ablation of the reference jobs (docs/agents.md);
# AGENTS="A1 A2 ..." (no spaces inside one) runs each family once per agent (ablations side by side; the table names them):
#   FAMILIES=multi_hop AGENTS="reference reference:train.advantage_scale=batch" bash scripts/families_study.sh
# RESUME=1 keeps every (family, agent) run already finished in $RUNS and runs only the rest (after a
# machine died mid-study); a run whose job failed or never finished is run again.
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
PYTHON=${PYTHON:-.venv/bin/python}
RESUME=${RESUME:-0}
AGENTS=${AGENTS:-${AGENT:-reference}}
export MT PYTHON BUDGET DEVICE RUNS TRAIN_WALL RESUME
mkdir -p "$RUNS"

if [[ "$SEED" == 1 ]]; then
  # One process per family; the baselines file is locked while a model's entry is written.
  printf '%s\n' $FAMILIES | xargs -P "$PARALLEL" -I{} \
    sh -c '"$MT" seed-baselines --family {} --budget "$BUDGET" --device "$DEVICE" > "$RUNS/seed-{}.log" 2>&1 \
      || { echo "seeding {} failed: see $RUNS/seed-{}.log"; exit 1; }'
fi
# One line per (family, agent): "FAMILY K AGENT"; run K of a family goes to $RUNS/FAMILY-aK.
# An episode that fails still lets the others run and the table print; the exit status is then 1.
failed=0
for f in $FAMILIES; do k=0; for a in $AGENTS; do k=$((k + 1)); echo "$f $k $a"; done; done |
  xargs -P "$PARALLEL" -L 1 sh -c 'out="$RUNS/$0-a$1"
    if [ "$RESUME" = 1 ] && "$PYTHON" -m metatrain.analysis.uplift --agent "$2" "$out"/*/result.json > /dev/null 2>&1; then
      echo "$0 ($2): already finished in $out, kept"; exit 0; fi
    if [ "$RESUME" = 1 ] && [ -d "$out" ]; then  # kept aside, out of the table glob
      aside="$RUNS/unfinished/$0-a$1-$(date +%s)"; mkdir -p "$aside"; mv "$out" "$out.log" "$aside/" 2>/dev/null; fi
    "$MT" episode --family "$0" --agent "$2" \
    --provider local --budget "$BUDGET" --device "$DEVICE" --runs "$out" \
    --train-wall-seconds "$TRAIN_WALL" --json "$out.json" > "$out.log" 2>&1; rc=$?
    echo "$0 ($2): episode exit $rc (log: $out.log)"; exit $rc' || failed=1
"$PYTHON" -m metatrain.analysis.uplift "$RUNS"/*/*/result.json | tee "$RUNS/uplift.md" || failed=1
exit $failed
