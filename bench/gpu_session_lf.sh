#!/usr/bin/env bash
# On the lent GPU machine (issue 41, item 3): ftui against LLaMA-Factory 0.9.5 at the Qwen2.5-1.5B
# shape on alpaca_en_demo, full fine-tuning then LoRA r16, each side with its best settings that
# run there, in one call (bench/vs_llamafactory_gpu.py says what runs and how it is counted).
# bench/gpu_session.sh runs it last when .whl_lf/ is there; alone, after bench/gpu_wheels.sh here
# (which fills .whl/ for ftui and .whl_lf/ for LLaMA-Factory), carry [".whl", ".whl_lf"] and:
#
#     bash bench/gpu_session_lf.sh         # results and logs under $OUT (or ./gpu_out)
#
# LLaMA-Factory and its pinned libraries (transformers 5.6.0, peft 0.18.1, accelerate 1.11.0,
# datasets 4.0.0, trl 0.24.0, tokenizers 0.22.2, ...) go to a folder of their own, first on
# the path of its process only; ftui's process never sees them. Liger and pydantic come from
# ftui's wheels; torch, torchaudio and the rest from the machine's image. The flash-attn package
# cannot be brought (a compiled CUDA extension; no network there), so LLaMA-Factory runs SDPA.
# The data: LF_DATA, a folder with alpaca_en_demo.json (default: ../shared/data/llamafactory, or
# /work/shared/data/llamafactory). A dry run here without a GPU, LLaMA-Factory's wheels installed in
# a folder (and a stand-in torchaudio module where torch has none):
#     PY=.venv/bin/python NO_WHEELS=1 LF_SITE=/tmp/lfsite ARGS="--cpu --shape demo --cutoff 512 --batch 2 --steps 8 --warmup 2" bash bench/gpu_session_lf.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=${PY:-python3}
WHL=${WHL:-.whl}
WHL_LF=${WHL_LF:-.whl_lf}
LF_SITE=${LF_SITE:-/tmp/lfsite}
if [ -z "${NO_WHEELS:-}" ]; then
    if [ -z "${FTUI_WHEELS_DONE:-}" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
        export PYTHONPATH=/tmp/site
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$LF_SITE" "$WHL_LF"/*.whl || exit 1
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DISABLE_VERSION_CHECK=1
LF_DATA=${LF_DATA:-$(ls -d ../shared/data/llamafactory /work/shared/data/llamafactory 2>/dev/null | head -1)}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import torch, transformers, peft; print('ftui side: torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
    PYTHONPATH=$LF_SITE:$PYTHONPATH "$PY" bench/vs_llamafactory_gpu.py --versions
    "$PY" -c "import flash_attn" 2>&1 | tail -1
} > "$OUT/env_lf.txt" 2>&1
cat "$OUT/env_lf.txt"
# shellcheck disable=SC2086
timeout "${LF_SET_S:-400}" "$PY" bench/vs_llamafactory_gpu.py --lf-site "$LF_SITE" --data "$LF_DATA" --out "$OUT" ${ARGS:-} \
    2> "$OUT/vs_llamafactory.log" || echo "vs_llamafactory_gpu.py ended with $? (the JSON holds the runs it finished)"
tail -n 12 "$OUT/vs_llamafactory.log"
