#!/usr/bin/env bash
# One GPU session's measurements for issue 6, sized for one 10-minute device call.
#
#   bash bench/gpu_session.sh            # part "main": train base + big, decode base (~9 min)
#   bash bench/gpu_session.sh ablation   # part "ablation": one row per speed change (~9 min)
#   bash bench/gpu_session.sh smoke      # the same commands at the small shape: checks the script
#
# Each benchmark runs under its own `timeout`, so a slow compile costs that
# benchmark, not the whole call; each part's budgets add up to <= 540 s. Outputs
# (the printed table, the JSON, stderr) go to $OUT (default /tmp/attnkit-gpu-out), one
# file per benchmark, plus env.txt. Paste the .txt tables into docs/lab/results-history.md
# and the measured column of bench/NOTES.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/attnkit-gpu-out}"
mkdir -p "$OUT"
PART="${1:-main}"
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/attnkit-inductor}"

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv || true
    python -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
    python -c "import transformers; print('transformers', transformers.__version__)" \
        || echo "transformers not installed: the hf rows will be missing"
    git rev-parse --short HEAD 2>/dev/null || true
    git status --porcelain -- attnkit bench 2>/dev/null | head -20 || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# run NAME SECONDS COMMAND...: stdout to NAME.txt, stderr to NAME.err, figures to NAME.json.
run() {
    local name="$1" budget="$2"
    shift 2
    echo "=== $name (timeout ${budget}s): $*"
    local t0=$SECONDS
    timeout -k 10 "$budget" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.err"
    local rc=$?
    echo "    rc $rc after $((SECONDS - t0)) s"
    [ "$rc" -eq 124 ] && echo "TIMED OUT after ${budget}s" >> "$OUT/$name.txt"
    tail -n 25 "$OUT/$name.txt"
}

case "$PART" in
main)
    # Issue 6's table: attnkit eager and fast vs nn.Transformer and HF Marian.
    run train_base 170 python bench/train_throughput.py --shape base --steps 10
    run train_big 190 python bench/train_throughput.py --shape big --steps 8
    # Issue 6's decoding setup: 512 sentences x 32 tokens, forced to 40, greedy + beam 4.
    run decode_base 170 python bench/decode_throughput.py --shape base
    ;;
smoke)
    run train_small 300 python bench/train_throughput.py --shape small --steps 1 --warmup 1 \
        --models attnkit,attnkit+chunked+fused,torch_nn,hf
    run decode_small 300 python bench/decode_throughput.py --shape small --sentences 8 \
        --repeats 1
    ;;
ablation)
    # One speed change per row (bench/NOTES.md): train base without the peers' cost.
    run train_base_ablation 240 python bench/train_throughput.py --shape base --steps 10 \
        --models attnkit,attnkit+fused,attnkit+chunked,attnkit+compile,attnkit_fast,hf
    # Decoding at the big shape, and the per-step sync policy at base (check_every).
    run decode_big 150 python bench/decode_throughput.py --shape big --beams 1,4
    run decode_base_sync 150 python bench/decode_throughput.py --shape base --no-compile \
        --no-hf --sync-row --repeats 5
    ;;
*)
    echo "unknown part '$PART': use main, ablation or smoke" >&2
    exit 2
    ;;
esac
echo "outputs in $OUT:"
ls -l "$OUT"
