#!/usr/bin/env bash
# The published progression on Multi30k De->En (issue 4): RNN < attention < Transformer,
# and a small version of the paper's Table 3. One row = one training run with a time
# cap, then greedy and beam evaluation on test2016; results are appended as JSON lines.
#
#   bash experiments/multi30k_progression.sh ROW [ROW ...]     # rows: see `rows` below
#   bash experiments/multi30k_progression.sh --list
#
# Environment:
#   DATA     Multi30k directory (default ../shared/data/multi30k)
#   OUT      where runs and results.jsonl go (default runs/progression)
#   MINUTES  training time cap per row (default 6)
#   EXTRA    more overrides for every row, e.g. "--set train.max_tokens=2048" on a CPU
#   EXTRA_RNN, EXTRA_TRANSFORMER   more overrides for the RNN rows or the Transformer rows only
#            (their optimisers differ: a learning rate for one is wrong for the other)
#   SEED     train.seed for every row; the run and its results are named ROW_sSEED
#            (the table reports each seed and their mean)
#   SEARCHES which test-set searches to score (default "greedy beam")
#
# Then: python experiments/progression_table.py $OUT/results.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data/multi30k}
OUT=${OUT:-runs/progression}
MINUTES=${MINUTES:-6}
EXTRA=${EXTRA:-}
EXTRA_RNN=${EXTRA_RNN:-}
EXTRA_TRANSFORMER=${EXTRA_TRANSFORMER:-}
SEED=${SEED:-}
SEARCHES=${SEARCHES:-greedy beam}
# RNN rows start from configs/multi30k_de_en_rnn.yaml, the others from multi30k_de_en.yaml.
RNN="--config configs/multi30k_de_en_rnn.yaml"
TRANSFORMER="--config configs/multi30k_de_en.yaml"
declare -A ROWS=(
  [rnn_lstm]="$RNN --set model.preset=luong --set model.attention=none --set model.input_feeding=false"
  [rnn_gru_context]="$RNN --set model.preset=bahdanau --set model.attention=none"
  [bahdanau]="$RNN --set model.preset=bahdanau"
  [luong_general]="$RNN --set model.preset=luong --set model.attention=luong_general"
  [luong_dot]="$RNN --set model.preset=luong --set model.attention=luong_dot"
  [luong_location]="$RNN --set model.preset=luong --set model.attention=luong_location --set model.max_src_len=128"
  [transformer_sinusoidal]="$TRANSFORMER"
  [transformer_learned]="$TRANSFORMER --set model.positions=learned"
  # Why do sinusoidal positions start slowly (issue 13)? Same model without positions, and
  # with unscaled token embeddings (std D^-0.5 against sinusoids of amplitude 1).
  [transformer_no_positions]="$TRANSFORMER --set model.positions=none"
  [transformer_unscaled]="$TRANSFORMER --set model.scale_embeddings=false"
  [transformer_relative16]="$TRANSFORMER --set model.positions=relative --set model.max_relative_position=16"
  [heads1]="$TRANSFORMER --set model.num_heads=1"
  [heads8]="$TRANSFORMER --set model.num_heads=8"
  [heads16]="$TRANSFORMER --set model.num_heads=16"
  [dropout0]="$TRANSFORMER --set model.dropout=0.0"
  [dropout0.1]="$TRANSFORMER --set model.dropout=0.1"
  [ls0]="$TRANSFORMER --set train.label_smoothing=0.0"
)

if [[ "${1:-}" == "--list" || $# -eq 0 ]]; then
  printf '%s\n' "${!ROWS[@]}" | sort
  exit 0
fi

mkdir -p "$OUT"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DEVICE=$(python -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")
for row in "$@"; do
  if [[ -z "${ROWS[$row]+set}" ]]; then
    echo "unknown row: $row (see --list)" >&2
    exit 2
  fi
  name=$row${SEED:+_s$SEED}
  run="$OUT/$name"
  seed_flag=${SEED:+--set train.seed=$SEED}
  family_extra=$([[ $row == rnn_* || $row == bahdanau || $row == luong_* ]] && echo "$EXTRA_RNN" || echo "$EXTRA_TRANSFORMER")
  # shellcheck disable=SC2086  # the overrides are meant to split into words
  cmd="attnkit train ${ROWS[$row]} --set data.dir=$DATA --set train.max_minutes=$MINUTES $seed_flag $EXTRA $family_extra --out $run --overwrite --no-progress"
  start=$(date +%s)
  python -m attnkit ${cmd#attnkit } > "$run.train.log" 2>&1 || { echo "$row: training failed, see $run.train.log" >&2; continue; }
  seconds=$(( $(date +%s) - start ))
  for search in $SEARCHES; do
    flag=$([[ $search == greedy ]] && echo --greedy || echo "--beam 5")
    # shellcheck disable=SC2086
    python -m attnkit evaluate --checkpoint "$run" --src "$DATA/test2016.de" --ref "$DATA/test2016.en" $flag --json > "$run.$search.json" \
      || { echo "$row: $search evaluation failed" >&2; continue; }
    python - "$row" "$search" "$run.$search.json" "$seconds" "$COMMIT" "$DEVICE" "$cmd" "$SEED" >> "$OUT/results.jsonl" <<'PY'
import json, sys, datetime
row, search, path, seconds, commit, device, cmd, seed = sys.argv[1:]
scores = json.load(open(path))
print(json.dumps({"row": row, "seed": int(seed) if seed else None, "search": search,
                  "train_seconds": int(seconds), "commit": commit,
                  "device": device, "date": datetime.date.today().isoformat(), "command": cmd,
                  **scores}))
PY
  done
  echo "$name: done in ${seconds}s"
done
