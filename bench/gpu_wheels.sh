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
mkdir -p .whl
rm -f .whl/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pins[@]}"
du -ch .whl/*.whl | tail -1
