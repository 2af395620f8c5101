# Two commands on a fresh machine (see README):
#   make demo   installs ftui into .venv and trains the built-in demo
#   make test   installs ftui with its test extras into .venv and runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 is pinned only here, for this project's CPU machines and CI (a local CPU
# wheel); the package itself accepts any recent torch, CUDA builds included.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-video install install-test lint app i18n

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[test]'

demo: install
	$(BIN)/ftui train --preset demo

app: install
	$(BIN)/ftui

lint: install-test
	$(BIN)/lint-imports

# Two test processes (pytest-xdist) use both cores of the CI machine: alone, the suite keeps one
# core busy about 80 % of the time (tests wait on runs they started); the tests that share a
# session-wide run stay on one worker (tests/conftest.py: GROUPED_FIXTURES)
PYTEST_WORKERS ?= 2

test: install-test lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

# The tests marked video (tests/test_video_runner.py): transformers' video processors need
# torchvision, which cannot load beside the CPU torch 2.13 of .venv; a second venv holds torch
# 2.14.1 with its torchvision 0.29.1 (cost measured: README, Tests)
VIDEO_VENV ?= .venv-video
VIDEO_TORCH ?= torch==2.14.1 torchvision==0.29.1

# torch and torchvision alone first (.ci/run builds this part while the main suite runs), then
# ftui itself: two editable installs of this tree at once would write its egg-info together
$(VIDEO_VENV)/bin/python:
	$(PY) -m venv $(VIDEO_VENV)
	$(VIDEO_VENV)/bin/pip install -q --upgrade pip
	$(VIDEO_VENV)/bin/pip install -q $(VIDEO_TORCH)

$(VIDEO_VENV)/.ftui-installed: $(VIDEO_VENV)/bin/python pyproject.toml
	$(VIDEO_VENV)/bin/pip install -q -e '.[vision]' $(VIDEO_TEST_DEPS)
	touch $@

# The video tests need pytest and the plugins pyproject's pytest options name, not the whole
# test extra (deepspeed, wandb, tensorboard...: 7.6 min to install here instead of 3)
VIDEO_TEST_DEPS ?= 'pytest>=8,<9' pytest-timeout pytest-xdist pytest-asyncio

VIDEO_TESTS ?= tests/test_video_runner.py tests/test_video_chat.py tests/test_video_plan.py

test-video: $(VIDEO_VENV)/.ftui-installed
	$(VIDEO_VENV)/bin/python -m pytest -q -n 0 -m "$(if $(SLOW),video,video and not slow)" -p no:cacheprovider $(VIDEO_TESTS)

# make test-video SLOW=1 also runs the slow video tests (the planner against a measured video step)

# The message catalog: extract the marked strings, update ftui/locale/zh_CN/.../ftui.po, compile ftui.mo
i18n: install-test
	$(BIN)/python tools/i18n.py
