#!/usr/bin/env bash
# On the lent GPU machine, as one device call (issue 18's H100 figures), after bench/gpu_wheels.sh
# here; the call carries .whl and gives timeout_s 600:
#
#     bash bench/gpu_session.sh            # results under $OUT (or ./gpu_out without a device tool)
#
# In the order that matters if the call is cut: bench/fa2_check.py (flash_attn fa2 against SDPA,
# loss and gradients, torch's real kernel), then the Trainer script and ftui's fastest settings
# at the Qwen2.5-1.5B shape (MFU and the ratio: pure bf16 with torch.compile and Liger at micro
# batch 8 with flash_attn fa2, 45.8 % MFU on 2026-11-27, the same with SDPA for the ratio within
# the call, fa2 with compile alone, then bf16 packed with fa2 (its peak against the planner)),
# then packed_attention.py's profile of where a pure-bf16 step's time goes with fa2, and its
# timing against SDPA's packed mask. bench/README.md has the figures. With LF=1 (and .whl_lf/ from
# gpu_wheels.sh carried), bench/gpu_session_lf.sh runs last: ftui against LLaMA-Factory 0.9.5 (about
# 400 s of its own, so with the rest it outgrows one 600 s call: run it alone in a call instead).
# gpu_set.py rewrites its JSON after every case, so a cut call keeps what finished (and kills
# the job of the case its time limit cut, which would train on under the profile). Every part
# has its own time limit (FA2_CHECK_S, GPU_SET_S, PROFILE_S) that together stay inside one 600 s call.
# Several GPUs (nvidia-smi -L lists more than one; issue 41 item 5): then, by itself, DDP, FSDP2,
# ZeRO-2 and ZeRO-3 on all of them at the same shape, cutoff and micro batch 8 per GPU (gpu_set.py
# MULTI_CASES, each case within MULTI_CASE_S, all within MULTI_GPU_S), and bench/multi_gpu_plan.py
# with --measured on what came back: its table puts the prediction beside each measurement. That
# part outgrows one 600 s call together with the rest: SINGLE=0 runs it alone (the single-GPU
# references it needs are then among its own cases). One GPU: it says so and skips them.
# Then bench/vl_step.py (issue 42): a Qwen2-VL SFT step, 448 x 448 images and about 1,000 text tokens,
# tokens/s and the peak against the planner (VL_STEP_S; after the single-GPU part, so a cut call
# loses it first: VL=1 SINGLE=0 runs it alone; VL=0 leaves it out).
# Then bench/serve_load.py (issue 44): ftui serve on the Qwen2.5-0.5B shape with random weights, 64 chat
# requests 16 at a time (half streamed): requests/s, tokens/s, time to first token, 429s, peak RSS
# (SERVE_S, default 120; after VL, so a cut call loses it first: SERVE=1 SINGLE=0 VL=0 runs it alone;
# SERVE=0 leaves it out). It needs the serve extra's wheels (bench/gpu_wheels.sh fetches them).
# A dry run here, without the wheels and the GPU (it also writes bench/results/gpu_set_cpu_demo.json):
#     PY=.venv/bin/python SHAPE=demo CUTOFF=128 STEPS=8 CASES=trainer_fp32_padded,fp32_packed NO_WHEELS=1 bash bench/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=${PY:-python3}
SHAPE=${SHAPE:-qwen2.5-1.5b}
if [ -z "${NO_WHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import torch, transformers, peft, pydantic, datasets; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'pydantic', pydantic.__version__, 'datasets', datasets.__version__)"
    "$PY" -c "import liger_kernel, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))"
    df -h /tmp | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
CASES=${CASES:-trainer_bf16_padded,pure_bf16_packed_compile_liger_mb8_fa2,pure_bf16_packed_compile_liger_mb8,pure_bf16_packed_compile_mb8_fa2,bf16_packed_fa2}
if [ "${SINGLE:-1}" != 0 ]; then
    # fa2 against SDPA first (loss and gradients on a small shape): what fa2's speed figures are worth
    timeout "${FA2_CHECK_S:-60}" "$PY" bench/fa2_check.py --out "$OUT" > /dev/null 2> "$OUT/fa2_check.log" || echo "fa2_check.py ended with $?"
    tail -n 4 "$OUT/fa2_check.log"
    timeout "${GPU_SET_S:-300}" "$PY" bench/gpu_set.py --shape "$SHAPE" --steps "${STEPS:-16}" --cutoff "${CUTOFF:-2048}" --cases "$CASES" \
        --out "$OUT" 2> "$OUT/gpu_set.log" || echo "gpu_set.py ended with $? (the JSON holds the cases it finished)"
    tail -n 20 "$OUT/gpu_set.log"
    timeout "${PROFILE_S:-180}" "$PY" bench/packed_attention.py --shape "$SHAPE" --profile --attn fa2_packed,sdpa_packed --precision pure_bf16 \
        --out "$OUT/packed_attention.json" > /dev/null 2> "$OUT/packed_attention.log" || echo "packed_attention.py ended with $?"
    tail -n 12 "$OUT/packed_attention.log"
fi
# a vision-language SFT step (issue 42): with the single-GPU part unless VL=0, or alone with VL=1 SINGLE=0
if [ "${VL:-$([ "${SINGLE:-1}" != 0 ] && echo 1 || echo 0)}" = 1 ]; then
    timeout "${VL_STEP_S:-120}" "$PY" bench/vl_step.py --device auto --steps "${VL_STEPS:-6}" --out "$OUT/vl_step.json" > /dev/null \
        2> "$OUT/vl_step.log" || echo "vl_step.py ended with $?"
    tail -n 4 "$OUT/vl_step.log"
fi
# ftui serve under load (issue 44): concurrent chat requests, streamed and not, against a serve job on
# the Qwen2.5-0.5B shape; with the single-GPU part unless SERVE=0, or alone with SERVE=1 SINGLE=0
if [ "${SERVE:-$([ "${SINGLE:-1}" != 0 ] && echo 1 || echo 0)}" = 1 ]; then
    timeout "${SERVE_S:-120}" "$PY" bench/serve_load.py --shape "${SERVE_SHAPE:-qwen2.5-0.5b}" --device auto \
        --requests "${SERVE_REQUESTS:-64}" --concurrency "${SERVE_CONCURRENCY:-8}" --max-tokens "${SERVE_MAX_TOKENS:-64}" \
        --no-record --out "$OUT/serve_load.json" > /dev/null 2> "$OUT/serve_load.log" || echo "serve_load.py ended with $?"
    tail -n 4 "$OUT/serve_load.log"
fi
# several GPUs: each engine on all of them (issue 41 item 5), then the plan against what they measured
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
MULTI_CASES=${MULTI_CASES:-ddp_pure_bf16_packed_compile_liger_mb8_fa2,fsdp_pure_bf16_packed_compile_liger_mb8_fa2,zero2_bf16_packed_liger_mb8_fa2,zero3_bf16_packed_liger_mb8_fa2,pure_bf16_packed_liger_mb8_fa2}
if [ "${NGPU:-0}" -gt 1 ]; then
    [ "${SINGLE:-1}" = 0 ] && MULTI_CASES=$MULTI_CASES,pure_bf16_packed_compile_liger_mb8_fa2  # DDP's and FSDP2's single-GPU reference
    timeout "${MULTI_GPU_S:-450}" "$PY" bench/gpu_set.py --shape "$SHAPE" --steps "${STEPS:-16}" --cutoff "${CUTOFF:-2048}" --cases "$MULTI_CASES" \
        --nproc "$NGPU" --timeout "${MULTI_CASE_S:-150}" --tag "_x$NGPU" --out "$OUT" 2> "$OUT/gpu_set_multi.log" \
        || echo "gpu_set.py (several GPUs) ended with $? (the JSON holds the cases it finished)"
    tail -n 12 "$OUT/gpu_set_multi.log"
    "$PY" bench/multi_gpu_plan.py --measured "$OUT"/gpu_set_*.json --out "$OUT/multi_gpu_plan.json" > "$OUT/multi_gpu_plan.md" \
        2> "$OUT/multi_gpu_plan.log" || echo "multi_gpu_plan.py ended with $?"
    tail -n 8 "$OUT/multi_gpu_plan.md"
else
    echo "one GPU (nvidia-smi -L lists ${NGPU:-0}): the multi-GPU cases (DDP, FSDP2, ZeRO-2, ZeRO-3) need several; skipped"
fi
ls -la "$OUT"
# ftui against LLaMA-Factory (issue 41), with its own wheels (.whl_lf) in a folder of their own
if [ -n "${LF:-}" ]; then
    FTUI_WHEELS_DONE=1 bash bench/gpu_session_lf.sh
fi
