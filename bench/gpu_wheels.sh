#!/usr/bin/env bash
# Here (the development machine, before a device call): downloads into .whl/ (git-ignored) the
# wheels that the device image lacks or holds in another version than this checkout is tested
# with, for Python 3.12 on x86-64 (the device's). bench/gpu_session.sh installs them there.
# The versions are this machine's .venv's, so the GPU runs the libraries the tests ran.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
pins=()
# missing from the image: pydantic and its parts, datasets and its own, Liger; transformers and peft
# in the versions tested here (the image has transformers 5.17 and its own huggingface_hub, kept)
for name in pydantic pydantic_core annotated-types typing-inspection typing_extensions datasets dill multiprocess \
            transformers peft; do
    pins+=("$name==$(version "$name")")
done
pins+=("liger-kernel==${LIGER_VERSION:-0.8.5}")  # CUDA only, so not in the CPU venv
# ftui serve (bench/serve_load.py, issue 44): the serve extra and what it and the bench's httpx client import
for name in fastapi starlette uvicorn sse-starlette anyio annotated-doc opentelemetry-api h11 click httpx httpcore; do
    pins+=("$name==$(version "$name")")
done
mkdir -p .whl
rm -f .whl/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pins[@]}"
# DeepSpeed for the ZeRO cases on a machine with several GPUs (bench/gpu_session.sh, issue 41): PyPI
# has only its source, so the wheel is built here without its CUDA ops (DeepSpeed JIT-compiles
# those it needs; ZeRO-2/3 on GPUs need none), plus the small packages it imports
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl "deepspeed==$(version deepspeed)"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "hjson==$(version hjson)" "py-cpuinfo==$(version py-cpuinfo)" "msgpack==$(version msgpack)" \
    "einops==$(version einops)" "ninja==$(version ninja)"
du -ch .whl/*.whl | tail -1
# LLaMA-Factory 0.9.5 for bench/gpu_session_lf.sh (issue 41): itself and the libraries it pins
# that the image lacks or holds in another version, into .whl_lf/ (a folder of their own there:
# only LLaMA-Factory's process has them on its path). Not its web UI, API or multimodal extras
# (gradio, fastapi, av, modelscope): its training path does not import them.
lf_pins=(llamafactory==0.9.5 transformers==5.6.0 peft==0.18.1 accelerate==1.11.0 datasets==4.0.0 trl==0.24.0
         tokenizers==0.22.2 dill==0.3.8 multiprocess==0.70.16 fsspec==2025.3.0 omegaconf==2.4.0 fire==0.7.1
         termcolor==3.3.0 "tyro==0.8.14" docstring-parser==0.18.0 shtab==1.13.0)
mkdir -p .whl_lf
rm -f .whl_lf/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl_lf "${lf_pins[@]}"
du -ch .whl_lf/*.whl | tail -1
