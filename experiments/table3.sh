#!/usr/bin/env bash
# The paper's Table 3 (variations on the Transformer) on Multi30k De->En, on a CPU.
#
#   bash experiments/table3.sh                 # every row, both seeds (skips rows already done)
#   bash experiments/table3.sh A_heads1 D_ls0  # some rows
#   bash experiments/table3.sh --list
#   bash experiments/table3.sh --sets B_dk16   # a row's --set overrides
#   python experiments/table3_table.py experiments/table3_results.jsonl   # or $RESULTS
#
# The base row is configs/multi30k_de_en_cpu.yaml (d_model 256, 4 heads of d_k 64, d_ff
# 1024, 3+3 layers, dropout 0.1, label smoothing 0.1, learned BPE 8000, a cosine that ends
# with the budget), trained for MINUTES (default 15) instead of the paper's 100K steps. Each
# other row changes what the paper's row changes, scaled to this model: (A) heads with
# d_k = d_model / h; (B) smaller d_k at 4 heads (attention width h*d_k below d_model);
# (C) layers, width (d_k = d_model / 4) and d_ff; (D) dropout and label smoothing;
# (E) learned positions. As in the paper: no checkpoint averaging, beam 4 (alpha 0.6),
# perplexity and BLEU on the development set (Multi30k valid), per sub-word token.
#
# Resumable: a (row, seed) already in $RESULTS is skipped, so the table can be built over
# several sittings; a run killed mid-way is retrained from scratch. The project's own
# runs so far are in experiments/table3_results.jsonl (RESULTS=experiments/table3_results.jsonl
# adds to them; each record names its CPU, so rows run on different machines show it).
#
# On a machine slower than the one that ran the base, a fixed step budget keeps rows
# comparable: EXTRA="--set train.max_steps=2154" MINUTES=240 trains the base's mean steps
# whatever the speed (the cosine still ends at the budget), and each record's command says so.
#
# Environment: DATA (default ../shared/data/multi30k), OUT (runs/table3: the runs),
# RESULTS ($OUT/results.jsonl), MINUTES (15), SEEDS ("1 2"), EXTRA (more --set overrides
# for every row).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data/multi30k}
OUT=${OUT:-runs/table3}
MINUTES=${MINUTES:-15}
SEEDS=${SEEDS:-1 2}
EXTRA=${EXTRA:-}
RESULTS=${RESULTS:-$OUT/results.jsonl}
declare -A ROWS=(
  [base]=""
  [A_heads1]="--set model.num_heads=1"
  [A_heads2]="--set model.num_heads=2"
  [A_heads8]="--set model.num_heads=8"
  [A_heads16]="--set model.num_heads=16"
  [B_dk16]="--set model.key_dim=16"
  [B_dk32]="--set model.key_dim=32"
  [C_layers1]="--set model.num_encoder_layers=1 --set model.num_decoder_layers=1"
  [C_layers2]="--set model.num_encoder_layers=2 --set model.num_decoder_layers=2"
  [C_layers4]="--set model.num_encoder_layers=4 --set model.num_decoder_layers=4"
  [C_dmodel128]="--set model.d_model=128"
  [C_dmodel512]="--set model.d_model=512"
  [C_dff512]="--set model.d_ff=512"
  [C_dff2048]="--set model.d_ff=2048"
  [D_dropout0]="--set model.dropout=0.0"
  [D_dropout0.2]="--set model.dropout=0.2"
  [D_ls0]="--set train.label_smoothing=0.0"
  [D_ls0.2]="--set train.label_smoothing=0.2"
  [E_learned]="--set model.positions=learned"
)
ORDER="base A_heads1 A_heads2 A_heads8 A_heads16 B_dk16 B_dk32 C_layers1 C_layers2 C_layers4
C_dmodel128 C_dmodel512 C_dff512 C_dff2048 D_dropout0 D_dropout0.2 D_ls0 D_ls0.2
E_learned"

if [[ "${1:-}" == "--list" ]]; then
  echo $ORDER | tr ' ' '\n'
  exit 0
fi
if [[ "${1:-}" == "--sets" ]]; then  # a row's overrides, one KEY=VALUE per line (tests read them)
  for part in ${ROWS[${2:?--sets ROW}]}; do [[ "$part" == --set ]] || echo "$part"; done
  exit 0
fi
rows=${*:-$ORDER}
mkdir -p "$OUT" "$(dirname "$RESULTS")"
touch "$RESULTS"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
for row in $rows; do
  if [[ -z "${ROWS[$row]+set}" ]]; then
    echo "unknown row: $row (see --list)" >&2
    exit 2
  fi
  for seed in $SEEDS; do
    if python - "$RESULTS" "$row" "$seed" <<'PY'
import json, sys
path, row, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = any(r.get("row") == row and r.get("seed") == seed
           for r in (json.loads(line) for line in open(path) if line.strip()))
sys.exit(0 if done else 1)
PY
    then
      echo "$row seed $seed: in $RESULTS already, skipped"
      continue
    fi
    run="$OUT/${row}_s$seed"
    # shellcheck disable=SC2086  # the overrides are meant to split into words
    cmd="attnkit train --config configs/multi30k_de_en_cpu.yaml ${ROWS[$row]} --set data.dir=$DATA --set train.max_minutes=$MINUTES --set train.seed=$seed $EXTRA --out $run --overwrite --no-progress"
    start=$(date +%s)
    # shellcheck disable=SC2086
    python -m attnkit ${cmd#attnkit } > "$run.train.log" 2>&1 || { echo "$row seed $seed: training failed, see $run.train.log" >&2; continue; }
    seconds=$(( $(date +%s) - start ))
    python -m attnkit evaluate --checkpoint "$run" --src "$DATA/valid.de" --ref "$DATA/valid.en" --beam 4 --alpha 0.6 --json > "$run.valid.json" \
      || { echo "$row seed $seed: evaluation failed" >&2; continue; }
    python - "$row" "$seed" "$run" "$seconds" "$COMMIT" "$CPU" "$cmd" >> "$RESULTS" <<'PY'
import datetime, json, sys
row, seed, run, seconds, commit, cpu, cmd = sys.argv[1:]
scores = json.load(open(f"{run}.valid.json"))
config = json.load(open(f"{run}/run.json"))
steps = max((json.loads(l).get("step", 0) for l in open(f"{run}/metrics.jsonl") if l.strip()), default=0)
print(json.dumps({"row": row, "seed": int(seed), "train_seconds": int(seconds), "steps": steps,
                  "commit": commit, "cpu": cpu, "date": datetime.date.today().isoformat(),
                  "command": cmd, **scores}))
PY
    echo "$row seed $seed: done in ${seconds}s"
  done
done
