#!/usr/bin/env bash
# Position extrapolation on Tiny Shakespeare (characters): one row per position scheme.
# Each row trains the `small` decoder at context 64 for the same number of steps
# (configs/tinyshakespeare_positions.yaml), then scores the validation split (the
# file's last 10%, as training held it out) in non-overlapping blocks of 64, 128,
# 256 and 512 characters. A learned position table has 64 rows: its longer contexts
# are recorded as the CLI's one-line refusal.
#
#   bash experiments/position_extrapolation.sh [ROW ...]   # rows: sinusoidal learned rotary alibi
#
# Environment:
#   DATA   Tiny Shakespeare directory (default ../shared/data/tinyshakespeare)
#   OUT    runs and results.jsonl (default runs/positions)
#   STEPS  training steps per row (default: the config's 800)
#   LOCK   a lock file that serialises the training runs on a shared machine
#          (default /tmp/attnkit-cpu.lock when flock exists; LOCK= turns it off)
#
# Then: python experiments/positions_table.py $OUT/results.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data/tinyshakespeare}
OUT=${OUT:-runs/positions}
CONTEXTS=(64 128 256 512)
LOCK=${LOCK-/tmp/attnkit-cpu.lock}
ROWS=("$@")
[[ ${#ROWS[@]} -eq 0 ]] && ROWS=(sinusoidal learned rotary alibi)
STEPS_SET=()
[[ -n "${STEPS:-}" ]] && STEPS_SET=(--set "train.max_steps=$STEPS")
WRAP=()
[[ -n "$LOCK" ]] && command -v flock >/dev/null && WRAP=(flock "$LOCK")

mkdir -p "$OUT"
VALID="$OUT/valid.txt"
# The validation split as a file: characters are tokens, so the split point is the trainer's.
python - "$DATA/input.txt" "$VALID" <<'PY'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
open(sys.argv[2], "w", encoding="utf-8").write(text[int(len(text) * 0.9):])
PY
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DEVICE=$(python -c "import platform, torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else f'cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)')")
for row in "${ROWS[@]}"; do
  run="$OUT/$row"
  train=(attnkit train --config configs/tinyshakespeare_positions.yaml --set "data.dir=$DATA"
         --set "model.positions=$row" "${STEPS_SET[@]}" --out "$run" --overwrite --no-progress)
  start=$(date +%s)
  "${WRAP[@]}" "${train[@]}" > "$OUT/$row.train.log" 2>&1
  seconds=$(( $(date +%s) - start ))
  for ctx in "${CONTEXTS[@]}"; do
    evaluate=(attnkit evaluate --checkpoint "$run" --text "$VALID" --context "$ctx" --json)
    if result=$("${WRAP[@]}" "${evaluate[@]}" 2> "$OUT/$row.eval.err"); then
      error=null
    else
      result='{}'
      error=$(python -c 'import json, sys; print(json.dumps(sys.stdin.read().strip()))' < "$OUT/$row.eval.err")
    fi
    python - "$row" "$ctx" "$seconds" "$COMMIT" "$DEVICE" "${train[*]}" "${evaluate[*]}" "$result" "$error" >> "$OUT/results.jsonl" <<'PY'
import datetime, json, sys
row, ctx, seconds, commit, device, train, evaluate, result, error = sys.argv[1:]
record = {"row": row, "context": int(ctx), **json.loads(result), "error": json.loads(error),
          "train_seconds": int(seconds), "commit": commit, "device": device,
          "date": datetime.date.today().isoformat(), "train_command": train,
          "command": evaluate}
print(json.dumps(record))
PY
  done
done
