"""Submitting a run to Slurm (issue 45: "A launcher choice", "Errors"): the batch script for
several configs, launcher slurm's config rules, the error paths with fake sbatch / srun on the
PATH (nothing half made is left), --dry-run creating nothing, and one submit to the real test
cluster."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for
from ftui.config.load import demo_config
from ftui.config.preflight import check_config
from ftui.jobs import slurm_submit
from ftui.jobs.slurm_submit import SlurmSubmitError, batch_script, job_environment, submit
from ftui.ops import errors, start as ops_start
from ftui.rundir.index import indexed_run_dirs
from ftui.rundir.paths import LAUNCH_FILE, SLURM_SCRIPT_FILE

DEMO = {"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "cutoff_len": 128}
WEIRD = "it's a \"run\" $HOME `x` #dir"  # blanks, both quotes, $, a backquote and a hash


def sbatch_lines(script: str) -> list[str]:
    return [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]


def slurm_cfg(tmp_path: Path, **over):
    return demo_config(output_dir=str(tmp_path / "runs"), launcher="slurm", **over)


# --- the batch script ------------------------------------------------------------------------

def test_the_script_sets_every_option_in_order_with_the_users_lines_last(tmp_path):
    cfg = slurm_cfg(tmp_path, device="auto", nnodes=2, nproc_per_node=4, engine="ddp", slurm_partition="gpu a100",
                    slurm_account="lab", slurm_qos="high", slurm_time="2-00:00:00", slurm_cpus_per_task=16,
                    slurm_mem_per_task="64G", slurm_constraint="a100&ib", slurm_warn_s=300,
                    slurm_sbatch_lines=["#SBATCH --mail-type=END", "--exclusive"])
    script = batch_script(cfg, tmp_path / "run-1", "/opt/py/bin/python")
    assert script.startswith("#!/bin/bash\n")
    assert sbatch_lines(script) == [
        '--job-name="ftui-run-1"', "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4", '--partition="gpu a100"',
        '--account="lab"', '--qos="high"', '--time="2-00:00:00"', '--cpus-per-task="16"', '--mem="64G"',
        '--constraint="a100&ib"', f'--output="{tmp_path}/run-1/slurm-%j.out"', "--open-mode=append", "--requeue",
        "--signal=B:USR1@300", "--mail-type=END", "--exclusive"]
    assert script.rstrip().splitlines()[-1] == f"exec /opt/py/bin/python -m ftui.jobs.slurm_batch {tmp_path}/run-1"


@pytest.mark.parametrize("over,gpus", [({"device": "cpu"}, None), ({"device": "auto", "nproc_per_node": 2, "engine": "ddp"}, "2"),
                                       ({"device": "cuda", "slurm_gpus_per_node": 8}, "8"),
                                       ({"device": "auto", "slurm_gpus_per_node": 0}, None)])
def test_gpus_per_node_follows_the_ranks_and_a_cpu_run_asks_for_none(tmp_path, over, gpus):
    lines = sbatch_lines(batch_script(slurm_cfg(tmp_path, **over), tmp_path / "r", "python"))
    assert [line for line in lines if line.startswith("--gpus")] == ([f"--gpus-per-node={gpus}"] if gpus else [])


@pytest.mark.parametrize("warn,requeue,expected", [(120, True, ["--requeue", "--signal=B:USR1@120"]),
                                                   (0, True, ["--requeue"]), (120, False, ["--no-requeue"])])
def test_the_warning_signal_only_with_a_warning_time_and_requeue(tmp_path, warn, requeue, expected):
    lines = sbatch_lines(batch_script(slurm_cfg(tmp_path, slurm_warn_s=warn, slurm_requeue=requeue), tmp_path / "r", "python"))
    assert [line for line in lines if line.startswith(("--requeue", "--no-requeue", "--signal"))] == expected


def test_a_resumed_job_runs_the_batch_step_with_its_checkpoint(tmp_path):
    script = batch_script(slurm_cfg(tmp_path), tmp_path / "r", "python", resume=tmp_path / "r" / "checkpoints" / "step-4")
    assert script.rstrip().endswith(f"-m ftui.jobs.slurm_batch {tmp_path}/r --resume {tmp_path}/r/checkpoints/step-4")


def test_paths_and_environment_with_quotes_blanks_and_dollars_reach_the_batch_step_as_they_are(tmp_path):
    """bash runs the script's tail (Slurm reads only the #SBATCH lines): the fake Python gets
    the run directory, the working directory and the exported variables exactly."""
    weird = tmp_path / (WEIRD + " %j \\ x")  # bash takes % and a backslash too (sbatch does not: the run directory's test)
    (run_dir := tmp_path / WEIRD / "run").mkdir(parents=True)
    fake = weird / "bin" / "py thon"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" "$PYTHONPATH" "$FTUI_LANG" > "$OUT"\n')
    fake.chmod(0o755)
    environ = {"PYTHONPATH": f"{weird}/src:/x", "FTUI_LANG": "zh $(touch gotcha) 'q'", "FTUI_API_TOKEN": "secret",
               "HOME": "/root", "OTHER": "x"}
    assert job_environment(environ) == {"FTUI_LANG": environ["FTUI_LANG"], "PYTHONPATH": environ["PYTHONPATH"]}  # no secret
    script = run_dir / "slurm.sh"
    script.write_text(batch_script(slurm_cfg(tmp_path), run_dir, str(fake), environ=environ, cwd=str(weird)))
    out = tmp_path / "out.txt"
    subprocess.run(["bash", str(script)], check=True, env={"OUT": str(out), "PATH": os.environ["PATH"]}, timeout=30)
    assert out.read_text().splitlines() == [str(weird), "-m", "ftui.jobs.slurm_batch", str(run_dir),
                                            environ["PYTHONPATH"], environ["FTUI_LANG"]]
    assert not list(tmp_path.rglob("gotcha")) and "secret" not in script.read_text()


def test_a_config_made_without_its_checks_cannot_put_a_line_into_the_script(tmp_path):
    cfg = slurm_cfg(tmp_path).model_copy(update={"slurm_sbatch_lines": ["#SBATCH --exclusive\nrm -rf ~"]})
    with pytest.raises(SlurmSubmitError, match="slurm_sbatch_lines: one #SBATCH line per list item"):
        batch_script(cfg, tmp_path / "r", "python")


def test_a_run_directory_with_a_line_break_is_refused(tmp_path):
    with pytest.raises(SlurmSubmitError, match="line break"):
        batch_script(slurm_cfg(tmp_path), tmp_path / "a\nb", "python")


@pytest.mark.parametrize("name", ["100%", "a\\b"])
def test_a_run_directory_slurm_would_read_as_an_output_pattern_is_refused(tmp_path, name):
    """Slurm 22.05 wrote --output=".../100%%j/slurm-%j.out" as .../100%8/...: the job could not start."""
    with pytest.raises(SlurmSubmitError, match="output_dir"):
        batch_script(slurm_cfg(tmp_path), tmp_path / name / "run", "python")
    assert "output_dir" in {p.field for p in check_config(DEMO | {"launcher": "slurm", "output_dir": str(tmp_path / name)}).problems}


# --- the config's rules ------------------------------------------------------------------------

@pytest.mark.parametrize("over,field,words", [
    ({"slurm_time": "two days"}, "slurm_time", "not a Slurm time"),
    ({"slurm_partition": "gpu\n#SBATCH --wrap=x"}, "slurm_partition", "line break"),
    ({"slurm_sbatch_lines": ["module load cuda"]}, "slurm_sbatch_lines", "must be an sbatch option"),
    ({"slurm_sbatch_lines": ["#SBATCH --array=1-4"]}, "slurm_sbatch_lines", "one job per run"),
    ({"slurm_sbatch_lines": ["#SBATCH -N 4"]}, "slurm_sbatch_lines", "set nnodes"),
    ({"slurm_sbatch_lines": ["#SBATCH --ntasks-per-node=8"]}, "slurm_sbatch_lines", "nproc_per_node"),
    ({"slurm_sbatch_lines": ["#SBATCH --output=/tmp/x"]}, "slurm_sbatch_lines", "RUN/slurm-<job id>.out"),
    ({"slurm_sbatch_lines": ["#SBATCH --signal=USR1@60"]}, "slurm_sbatch_lines", "slurm_warn_s"),
    ({"slurm_sbatch_lines": ["#SBATCH --no-requeue"]}, "slurm_sbatch_lines", "slurm_requeue"),
    ({"slurm_sbatch_lines": ["#SBATCH --open-mode=truncate"]}, "slurm_sbatch_lines", "appends"),
    ({"slurm_sbatch_lines": ["#SBATCH --exclusive\n#SBATCH --nodes=9"]}, "slurm_sbatch_lines", "line break"),
    ({"gpus": "0,1"}, "gpus", "slurm_gpus_per_node"),
    ({"node_rank": 1, "nnodes": 2, "engine": "ddp"}, "node_rank", "Slurm starts every node"),
    ({"device": "cpu", "slurm_gpus_per_node": 2}, "slurm_gpus_per_node", "uses no GPU"),
    ({"nproc_per_node": 4, "engine": "ddp", "slurm_gpus_per_node": 2}, "slurm_gpus_per_node", "need a GPU each"),
])
def test_launcher_slurm_refuses_what_the_script_cannot_hold(over, field, words):
    checked = check_config(DEMO | {"launcher": "slurm"} | over)
    problems = {p.field: p.message for p in checked.problems}
    assert checked.config is None and words in problems[field], problems


@pytest.mark.parametrize("limit", ["30", "30:00", "4:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"])
def test_slurms_time_formats_pass(limit):
    assert check_config(DEMO | {"launcher": "slurm", "slurm_time": limit}).problems == []


def test_slurm_needs_no_rendezvous_and_skips_this_machines_gpu_checks_saying_which():
    several = DEMO | {"nnodes": 2, "engine": "ddp", "device": "cuda", "fp16": True}  # no GPU on this machine
    local = {p.field for p in check_config(several).problems}
    assert {"rdzv_endpoint", "device"} <= local
    checked = check_config(several | {"launcher": "slurm", "slurm_sbatch_lines": ["#SBATCH --exclusive"]})
    assert checked.problems == [] and checked.config is not None
    assert any("compute nodes" in w and "nproc_per_node" in w for w in checked.warnings)
    assert not any("compute nodes" in w for w in check_config(DEMO).warnings)


# --- submitting, with fake Slurm commands on the PATH -------------------------------------------

@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """A PATH holding only the fake commands written with ``fake_slurm(name, shell body)``."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def write(name: str, body: str) -> Path:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path
    write.dir = bin_dir
    return write


RUN_PROBE = 'while [ "${1#--}" != "$1" ]; do shift; done; exec "$@"'  # srun: drop the options, run the probe here
SBATCH_OK = 'echo "$@" > "${0%/*}/sbatch-args"; echo 4242'


def test_submit_probes_submits_and_records_the_job(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", SBATCH_OK)
    started = ops_start.start(slurm_cfg(tmp_path))
    run_dir = started.run_dir
    launch = json.loads((run_dir / LAUNCH_FILE).read_text())
    assert launch["scheduler"] | {"submitted": 0} == {"kind": "slurm", "job_id": "4242", "cluster": None, "submit_host": launch["host"],
                                                      "submitted": 0, "script": SLURM_SCRIPT_FILE}
    assert launch["command"] == ["sbatch", "--parsable", str(run_dir / SLURM_SCRIPT_FILE)] == started.info["command"]
    assert (fake_slurm.dir / "sbatch-args").read_text().split() == ["--parsable", str(run_dir / SLURM_SCRIPT_FILE)]
    assert stat.S_IMODE((run_dir / SLURM_SCRIPT_FILE).stat().st_mode) == 0o600
    assert not list(run_dir.glob(".slurm-probe-*"))  # read back and removed
    assert started.notices == [] and started.other_node_commands() == []


def test_sbatch_naming_a_cluster_and_an_array_job(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", "echo '77;gpu-cluster'")
    assert ops_start.start(slurm_cfg(tmp_path)).info["scheduler"]["cluster"] == "gpu-cluster"
    fake_slurm("sbatch", "echo '78_1'")
    with pytest.raises(errors.SlurmRefused, match="array job"):
        ops_start.start(slurm_cfg(tmp_path))


def only_the_runs_root_is_left(tmp_path: Path) -> bool:
    root = tmp_path / "runs"
    return (not root.exists() or list(root.iterdir()) == []) and indexed_run_dirs() == []


def test_no_sbatch_on_the_path_is_refused_with_what_to_do_and_nothing_left(tmp_path, fake_slurm):
    with pytest.raises(errors.SlurmRefused) as refused:
        ops_start.start(slurm_cfg(tmp_path))
    assert "needs Slurm's sbatch on the PATH" in str(refused.value) and "launcher local" in str(refused.value)
    assert only_the_runs_root_is_left(tmp_path)


def test_a_partition_slurm_rejects_names_the_field_with_slurms_words_escaped(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", r"printf 'sbatch: error: invalid partition specified: nosuch\033[2J\nsbatch: error: Batch job submission "
                         r"failed: Invalid partition name specified\n' >&2; exit 1")
    with pytest.raises(errors.SlurmRefused) as refused:
        ops_start.start(slurm_cfg(tmp_path, slurm_partition="nosuch"))
    message = str(refused.value)
    assert "invalid partition specified: nosuch" in message and "slurm_partition" in message
    assert "\x1b" not in message and "\\x1b[2J" in message
    assert only_the_runs_root_is_left(tmp_path)


@pytest.mark.parametrize("srun", ["exit 0", 'for a; do p=$a; done; : > "${0%/*}/.slurm-probe-$p"'])  # nothing; elsewhere
def test_a_node_that_does_not_see_the_run_directory_is_refused_before_sbatch(tmp_path, fake_slurm, srun, monkeypatch):
    monkeypatch.setattr(slurm_submit, "PROBE_READ_S", 0.5)  # how long a network filesystem may lag: nothing comes here
    fake_slurm("srun", srun)
    fake_slurm("sbatch", ': > "${0%/*}/sbatch-ran"; echo 1')
    with pytest.raises(errors.SlurmRefused) as refused:
        ops_start.start(slurm_cfg(tmp_path))
    assert "did not see" in str(refused.value) and "filesystem the nodes share" in str(refused.value)
    assert not (fake_slurm.dir / "sbatch-ran").exists() and only_the_runs_root_is_left(tmp_path)


def test_a_busy_cluster_submits_with_a_notice_that_the_check_could_not_run(tmp_path, fake_slurm):
    fake_slurm("srun", "echo 'srun: job 9 queued and waiting for resources' >&2; "
                       "echo 'srun: error: Unable to allocate resources: Requested nodes are busy' >&2; exit 1")
    fake_slurm("sbatch", SBATCH_OK)
    started = ops_start.start(slurm_cfg(tmp_path))
    assert started.info["scheduler"]["job_id"] == "4242"
    assert len(started.notices) == 1 and "could not run now" in started.notices[0].text


def test_the_cluster_name_comes_from_scontrol_when_sbatch_and_the_node_do_not_say(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)  # the probe runs here, outside a job: no SLURM_CLUSTER_NAME
    fake_slurm("sbatch", SBATCH_OK)
    fake_slurm("scontrol", 'echo "Configuration data as of now"; echo "ClusterName             = labcluster"')
    assert ops_start.start(slurm_cfg(tmp_path)).info["scheduler"]["cluster"] == "labcluster"


def test_an_sbatch_that_does_not_answer_is_ended_and_refused_and_a_slow_probe_is_skipped(tmp_path, fake_slurm, monkeypatch):
    from ftui.jobs import slurm_submit

    monkeypatch.setattr(slurm_submit, "SBATCH_TIMEOUT_S", 0.5)
    monkeypatch.setattr(slurm_submit, "PROBE_TIMEOUT_S", 0.5)
    fake_slurm("srun", "exec /bin/sleep 60")
    fake_slurm("sbatch", SBATCH_OK)
    started = ops_start.start(slurm_cfg(tmp_path))
    assert started.info["scheduler"]["job_id"] == "4242" and "did not answer" in started.notices[0].text
    fake_slurm("sbatch", "exec /bin/sleep 60")
    with pytest.raises(errors.SlurmRefused, match="sbatch did not answer.*squeue --me"):
        ops_start.start(slurm_cfg(tmp_path))
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [started.run_dir.name]


def test_a_job_whose_launch_record_cannot_be_written_is_cancelled(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", SBATCH_OK)
    fake_slurm("scancel", 'echo "$@" > "${0%/*}/scancel-args"')
    (run_dir := tmp_path / "run").mkdir()
    (run_dir / LAUNCH_FILE).mkdir()  # launch.json cannot be replaced
    with pytest.raises(SlurmSubmitError, match="job 4242 was cancelled"):
        submit(slurm_cfg(tmp_path), run_dir)
    assert (fake_slurm.dir / "scancel-args").read_text().split() == ["4242"]


def test_a_node_that_cannot_run_ftuis_python_is_refused(tmp_path, fake_slurm):
    fake_slurm("srun", "echo 'python: No module named ftui' >&2; exit 1")
    fake_slurm("sbatch", SBATCH_OK)
    with pytest.raises(errors.SlurmRefused, match="could not run ftui's Python.*No module named ftui"):
        ops_start.start(slurm_cfg(tmp_path))
    assert only_the_runs_root_is_left(tmp_path)


def test_a_refused_resubmit_keeps_the_run_and_its_earlier_script(tmp_path, fake_slurm):
    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", SBATCH_OK)
    cfg = slurm_cfg(tmp_path)
    run_dir = ops_start.start(cfg).run_dir
    first = (run_dir / SLURM_SCRIPT_FILE).read_text()
    fake_slurm("sbatch", "echo 'sbatch: error: Invalid qos specification' >&2; exit 1")
    with pytest.raises(SlurmSubmitError, match="slurm_qos"):
        submit(cfg, run_dir, resume=run_dir / "checkpoints" / "step-2")
    assert (run_dir / SLURM_SCRIPT_FILE).read_text() == first and (run_dir / LAUNCH_FILE).exists()


def test_a_resume_of_a_slurm_run_releases_its_lock_and_resubmits_with_the_checkpoint(tmp_path, fake_slurm):
    from ftui.ops.resume import PreparedResume
    from ftui.rundir.lock import lock_run_dir

    fake_slurm("srun", RUN_PROBE)
    fake_slurm("sbatch", SBATCH_OK)
    cfg = slurm_cfg(tmp_path)
    run_dir = ops_start.start(cfg).run_dir
    ckpt = run_dir / "checkpoints" / "step-2"
    lock = lock_run_dir(run_dir)
    started = ops_start.start_resumed(PreparedResume(run_dir, cfg, ckpt, lock))
    assert started.resumed_from == ckpt and started.info["resumed_from"] == str(ckpt)
    assert (run_dir / SLURM_SCRIPT_FILE).read_text().rstrip().endswith("--resume " + shlex.quote(str(ckpt)))
    os.close(lock_run_dir(run_dir, wait_s=0))  # released: the job's node 0 takes it
    with pytest.raises(OSError):
        os.fstat(lock)


# --- the CLI ----------------------------------------------------------------------------------

def ftui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_dry_run_prints_the_script_and_the_run_directory_and_creates_nothing(tmp_path):
    root = tmp_path / WEIRD
    done = ftui("train", "--preset", "demo", "--slurm", "--dry-run", "--root", str(root), "--partition", "debug",
                "--time", "30", "--nodes", "1", "--sbatch", "#SBATCH --mail-type=END")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --partition=\"debug\"" in done.stdout and "#SBATCH --mail-type=END" in done.stdout
    assert "#SBATCH --time=\"30\"" in done.stdout and str(root) in done.stderr
    assert not root.exists() and not (tmp_path / "runs").exists()


def test_dry_run_needs_launcher_slurm_and_flags_are_checked_as_config_keys(tmp_path):
    done = ftui("train", "--preset", "demo", "--dry-run", "--root", str(tmp_path / "runs"))
    assert done.returncode == 2 and "--slurm" in done.stderr
    done = ftui("train", "--preset", "demo", "--slurm", "--dry-run", "--time", "soon", "--root", str(tmp_path / "runs"))
    assert done.returncode == 2 and "slurm_time" in done.stderr and "not a Slurm time" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_train_slurm_without_sbatch_exits_non_zero_saying_what_to_do(tmp_path):
    done = ftui("train", "--preset", "demo", "--slurm", "--detach", "--root", str(tmp_path / "runs"),
                env={"PATH": str(tmp_path)})
    assert done.returncode != 0 and "sbatch on the PATH" in done.stderr
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


# --- the real cluster ----------------------------------------------------------------------------

@pytest.mark.slurm
def test_train_slurm_detach_submits_a_real_job_and_records_its_id(tmp_path, slurm_cluster):
    root = tmp_path / WEIRD
    done = ftui("train", "--preset", "demo", "--slurm", "--detach", "--root", str(root), "--time", "5")
    assert done.returncode == 0, done.stderr
    [run_dir] = list(root.iterdir())
    scheduler = json.loads((run_dir / LAUNCH_FILE).read_text())["scheduler"]
    assert scheduler["kind"] == "slurm" and scheduler["cluster"] == "ftuitest" and scheduler["job_id"].isdigit()
    assert f"job {scheduler['job_id']}" in done.stdout and not list(run_dir.glob(".slurm-probe-*"))
    job = slurm_cluster.job(scheduler["job_id"])
    try:
        assert job["JobName"] == f"ftui-{run_dir.name}" and job["TimeLimit"] == "00:05:00"
        # sbatch read the quoted --output: the job's output goes into the run directory, whatever its path holds
        assert wait_for((run_dir / f"slurm-{scheduler['job_id']}.out").exists, timeout=60)
    finally:
        subprocess.run(["scancel", scheduler["job_id"]], timeout=30)


def test_a_partition_the_real_cluster_rejects_is_refused_naming_the_field_and_nothing_is_left(tmp_path, slurm_cluster):
    """Slurm itself refuses ``slurm_partition: nosuch`` (the probe's srun or sbatch): the start
    says so naming the field, and the run directory it made is gone."""
    from ftui.ops.errors import SlurmRefused
    from ftui.ops.start import start
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, launcher="slurm", slurm_partition="nosuch")
    with pytest.raises(SlurmRefused) as refused:
        start(cfg)
    assert "slurm_partition" in str(refused.value) and "nosuch" in str(refused.value), str(refused.value)
    assert list((tmp_path / "runs").iterdir()) == []
