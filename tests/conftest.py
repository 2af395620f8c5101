"""Shared fixtures: the demo tokenizer, LLaMA-Factory's demo data, and a synchronous runner
that trains a tiny model through the real launcher (ftui.jobs.spawn)."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE
from ftui.config.load import demo_config
from ftui.jobs.launch import prepare_run, launch_command
from ftui.jobs.torch_env import torch_process_env

# One intra-op thread for every torch in the suite (this process and the runs it starts, which
# honour a user's OMP_NUM_THREADS): the suite runs on 2 cores beside other work, and a CPU run
# with more threads than free cores waits on descheduled threads at every op (the demo's steps
# took 25x longer beside one busy process). Set before torch is imported anywhere.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
# LLaMA-Factory's data/ folder (its demo datasets and examples/), which this repository does not
# carry: beside the checkout, or where FTUI_TEST_LF_DATA names it (a worktree, a fresh clone)
LLAMAFACTORY_DATA = Path(os.environ.get("FTUI_TEST_LF_DATA") or ROOT.parent / "shared" / "data" / "llamafactory")


@pytest.fixture(scope="session", autouse=True)
def _session_ftui_home(tmp_path_factory):
    """No test writes the user's own FTUI_HOME (its runs root and run index), not even the
    session-wide fixtures that train before any test's own environment is set."""
    saved = os.environ.get("FTUI_HOME")
    os.environ["FTUI_HOME"] = str(tmp_path_factory.mktemp("ftui-home"))
    yield
    if saved is None:
        os.environ.pop("FTUI_HOME", None)
    else:
        os.environ["FTUI_HOME"] = saved


@pytest.fixture(autouse=True)
def _english(monkeypatch):
    """Each test starts, and ends, in English with no FTUI_LANG exported: a language switch in
    an app exports FTUI_LANG (for the jobs it starts) and sets this process's language, and a
    test that switched must not leave the next one's CLI output or runs in Chinese (a CI run
    here printed the CLI in Chinese in 13 later tests of one worker)."""
    from ftui.i18n import set_language

    monkeypatch.delenv("FTUI_LANG", raising=False)
    set_language("en", export=False)
    yield
    set_language("en", export=False)


@pytest.fixture(autouse=True)
def _ftui_home(tmp_path, monkeypatch):
    """Each test its own FTUI_HOME, tmp_path (so its default runs root is tmp_path/runs): a run
    one test indexes is never listed by another."""
    monkeypatch.setenv("FTUI_HOME", str(tmp_path))


@pytest.fixture(scope="session")
def lf_data() -> Path:
    if not (LLAMAFACTORY_DATA / "dataset_info.json").exists():
        pytest.skip(f"needs LLaMA-Factory's demo data, which this repository does not carry: none at {LLAMAFACTORY_DATA} "
                    "(put LLaMA-Factory's data/ folder there, or name it in FTUI_TEST_LF_DATA)")
    return LLAMAFACTORY_DATA


@pytest.fixture(scope="session")
def demo_tokenizer():
    from ftui.runner.model import load_tokenizer

    return load_tokenizer(demo_config())


# --- Several test processes (`make test` runs pytest-xdist's two workers): a session-wide run
# is trained once, not once per worker. The runs the tests write into (each adds its predict /
# export jobs to the demo run; the engine runs are shared by the engine and export tests) keep
# their tests on one worker (an xdist_group per fixture, `--dist loadgroup`), and so do the
# tests of a module-scoped fixture that starts training processes (else each worker that drew
# one of its tests would start them); the read-only pre-trained base is built once under a
# lock and read by every worker.
GROUPED_FIXTURES = ("demo_train", "engine_runs",  # demo_run, demo_copy use demo_train
                    "four_step_run", "mirrored_run", "two_fsdp_ranks", "family_runs",
                    # test_vl_train's 2-rank VL runs were trained on both workers (47 s each, a
                    # timing run of the suite); the others train too (vl_run: test_vl_chat's and
                    # test_vl_predict's)
                    "two_ranks", "gpu_run", "vl_run", "vl_runs")
# The Slurm clusters' tests are marked slurm and share one worker (group "slurm_cluster"): only it
# starts the session's cluster, and the two-node cluster, while it runs, replaces SLURM_CONF there
SLURM_FIXTURES = ("slurm_cluster", "slurm_two_nodes")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the marks into the groups it schedules by
def pytest_collection_modifyitems(config, items):
    video_skip = None if importlib.util.find_spec("torchvision") else pytest.mark.skip(reason="needs torchvision for video processors: make test-video")
    for item in items:
        if video_skip is not None and item.get_closest_marker("video") is not None:
            item.add_marker(video_skip)
        fixtures = getattr(item, "fixturenames", ())
        if any(name in fixtures for name in SLURM_FIXTURES):
            item.add_marker(pytest.mark.slurm)
            item.add_marker(pytest.mark.xdist_group("slurm_cluster"))
            continue
        for name in GROUPED_FIXTURES:
            if name in fixtures:
                item.add_marker(pytest.mark.xdist_group(name))
                break


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)``'s result (a string), computed once per test session however many
    xdist workers ask: the first builds under a lock in the session's shared temporary folder,
    the others wait for it and read what it recorded."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # above each worker's own basetemp
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / f"{name}.done"
        if done.is_file():
            return done.read_text()
        folder = shared / name
        shutil.rmtree(folder, ignore_errors=True)  # a build that failed in another worker
        folder.mkdir()
        result = build(folder)
        done.write_text(result)
        return result


def _slurm_or_skip(**kwargs):
    """A started Slurm cluster (tests/slurm_cluster.py) for the fixture's scope, or the tests
    that need it skipped with the reason: not root, no packages, daemons that did not come up."""
    from tests.slurm_cluster import ClusterUnavailable, running_cluster

    try:
        with running_cluster(**kwargs) as cluster:
            yield cluster
            return
    except ClusterUnavailable as exc:
        reason = str(exc)
    pytest.skip(f"needs a Slurm cluster on this host, which could not start: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node Slurm cluster on localhost for the whole session (node: this host's short
    name, 2 CPUs; partitions debug (default), short (MaxTime=2), low and high (high preempts));
    SLURM_CONF names it in os.environ while it runs, so ftui's own sbatch/squeue/scancel reach
    it. Its tests are marked slurm and kept on one xdist worker (pytest_collection_modifyitems)."""
    yield from _slurm_or_skip()


@pytest.fixture(scope="module")
def slurm_two_nodes():
    """Two Slurm nodes, n1 and n2 (two slurmd on this host, 1 CPU each), for a multi-node job:
    started for the module that asks (a slow test's), its SLURM_CONF set until the module ends
    (so a module using it does not use slurm_cluster too: ftui's own calls would reach n1/n2)."""
    yield from _slurm_or_skip(nodes=["n1", "n2"], cpus=1)


@pytest.fixture(scope="session")
def pretrained_base(tmp_path_factory) -> Path:
    """A demo model given some pre-training (full fine-tuning on the demo set), to fine-tune
    with LoRA as users do: LoRA over random frozen weights can barely move the loss. Read only
    (every test trains into its own run), so the workers share one."""
    def build(folder: Path) -> str:
        cfg = demo_config(output_dir=str(folder), max_steps=150, logging_steps=10)
        run_dir, _events, proc = train_sync(cfg)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return str(run_dir / "final")

    return Path(built_once(tmp_path_factory, "base", build))


@pytest.fixture(scope="session")
def demo_train(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The built-in demo trained by the README's first command, `ftui train --preset demo`
    (about half a minute), followed to its end: (the run, the CLI's output). Trained once per
    session: test_launch checks the command's output and listing, the chat, predict, eval and
    export tests read the run (copy it to write). CUDA_DEVICE_ORDER and OMP_WAIT_POLICY are left
    unset, so the test of launch.json sees ftui set them."""
    folder = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_DEVICE_ORDER", "OMP_WAIT_POLICY")}
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", "--preset", "demo", "--set", f"output_dir={folder / 'runs'}"],
                          cwd=folder, capture_output=True, text=True, timeout=600, env=env)
    runs = sorted(p for p in (folder / "runs").iterdir() if p.is_dir()) if (folder / "runs").is_dir() else []
    assert proc.returncode == 0 and len(runs) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return runs[0].resolve(), proc


@pytest.fixture(scope="session")
def demo_run(demo_train) -> Path:
    return demo_train[0]


ENGINE_MAX_STEPS, ENGINE_SAVE_STEPS = 8, 4


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory):
    """(preset, method) -> (run_dir, events), each trained once per session: 8 steps on 2
    processes (1 for single) with checkpoints at steps 4 and 8. Shared by the engine tests and
    the export tests (which export these runs' checkpoints: no training of their own). DDP
    computes under bf16 autocast, the default suite's run of it (CI time: test_train.py's
    precision matrix is marked slow); the others in fp32, where every engine gives one curve."""
    cache: dict[tuple[str, str], tuple[Path, list[dict]]] = {}

    def get(preset: str, method: str):
        if (preset, method) not in cache:
            root = tmp_path_factory.mktemp(f"{preset}-{method}")
            cfg = tiny_config(
                root, engine=preset, finetuning_type=method, nproc_per_node=1 if preset == "single" else 2,
                max_steps=ENGINE_MAX_STEPS, save_steps=ENGINE_SAVE_STEPS, learning_rate=5e-3 if method == "full" else 2e-2,
                run_name=f"{preset}-{method}", bf16=preset == "ddp",
            )
            run_dir, events, proc = train_sync(cfg)
            assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
            cache[(preset, method)] = (run_dir, events)
        return cache[(preset, method)]

    return get


def lora_config(tmp_path: Path, base: Path, **overrides):
    """LoRA on the pre-trained base, on data it has not seen (tests/data/farm_qa.json)."""
    over = dict(model_name_or_path=str(base), model_init="pretrained", finetuning_type="lora",
                dataset=str(DATA / "farm_qa.json"), learning_rate=1e-2, lora_rank=16, max_steps=32)
    over.update(overrides)
    return tiny_config(tmp_path, **over)


def tiny_config(tmp_path: Path, **overrides):
    """The demo model and data, cut to a few steps: fast enough for every engine x method."""
    base = dict(
        output_dir=str(tmp_path / "runs"), max_steps=24, per_device_train_batch_size=4,
        learning_rate=5e-3, warmup_ratio=0.0, lr_scheduler_type="constant", logging_steps=1,
        max_samples=16, run_name="t",
    )
    base.update(overrides)
    return demo_config(**base)


def train_sync(cfg, timeout: int = 300) -> tuple[Path, list[dict], subprocess.CompletedProcess]:
    """Runs the launch command in the foreground (not detached) and returns the run's events."""
    run_dir = prepare_run(cfg).resolve()
    env = torch_process_env()  # what a job's processes get (launch.start_run)
    proc = subprocess.run(launch_command(cfg, run_dir, sys.executable), env=env, capture_output=True, text=True, timeout=timeout)
    (run_dir / "train.log").write_text(proc.stdout + proc.stderr)
    return run_dir, read_all(run_dir / EVENTS_FILE), proc


def resume_sync(run_dir: Path, checkpoint: Path, timeout: int = 300) -> tuple[list[dict], subprocess.CompletedProcess]:
    """Resumes a run from a checkpoint in the foreground; returns the events of the resumed part."""
    from ftui.config.load import load_config

    cfg, _ = load_config(run_dir / "config.yaml")
    env = torch_process_env()  # what a job's processes get (launch.start_run)
    cmd = launch_command(cfg, run_dir, sys.executable, resume=checkpoint)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    with open(run_dir / "train.log", "a") as fh:
        fh.write(proc.stdout + proc.stderr)
    events = read_all(run_dir / EVENTS_FILE)
    last_start = max(i for i, e in enumerate(events) if e["event"] == "run_start")
    return events[last_start:], proc


def wait_for(predicate, timeout=120.0, interval=0.2) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def steps_of(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "step"]
