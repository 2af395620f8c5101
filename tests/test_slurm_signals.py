"""Signals under Slurm (issue 45, interface 6): slurmstepd signals every process of a step and the
launcher forwards the Stop too, so a rank sees SIGTERM two or three times for one Stop. Under Slurm
(SLURM_JOB_ID set) a repeat within SIGNAL_REPEAT_S is that same Stop; a later one, or any repeat
outside Slurm, keeps its meaning (exit / kill at once)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from ftui.rundir.rank_env import SIGNAL_REPEAT_S, same_stop


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Exited(Exception):
    pass


def _exit(code: int):
    raise Exited(code)


@pytest.fixture
def clock(monkeypatch):
    import ftui.jobs.spawn as spawn
    import ftui.runner.faults as faults

    c = Clock()
    monkeypatch.setattr(faults.time, "monotonic", c)  # the one time module: spawn reads it too
    assert spawn.time is faults.time
    monkeypatch.setattr(faults.os, "_exit", _exit)
    return c


def test_same_stop_only_under_slurm_and_within_the_window():
    slurm = {"SLURM_JOB_ID": "7"}
    assert not same_stop(None, 5.0, slurm)  # the first signal is a Stop
    assert same_stop(0.0, SIGNAL_REPEAT_S - 0.5, slurm)
    assert not same_stop(0.0, SIGNAL_REPEAT_S + 0.5, slurm)
    assert not same_stop(0.0, 1.0, {})  # not under Slurm: today's rule


@pytest.mark.parametrize("slurm", [True, False])
def test_a_rank_takes_a_quick_repeat_under_slurm_as_the_same_stop(clock, monkeypatch, slurm):
    from ftui.runner.faults import StopRequest

    if slurm:
        monkeypatch.setenv("SLURM_JOB_ID", "12")
    else:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    stop = StopRequest()
    stop._handle(signal.SIGTERM, None)
    assert stop.requested
    clock.now += 1.0  # slurmstepd's TERM, then the launcher's forward
    if slurm:
        stop._handle(signal.SIGTERM, None)  # ignored: the rank goes on to save its checkpoint
        clock.now += 1.0
        stop._handle(signal.SIGINT, None)
        assert stop.requested
    else:
        with pytest.raises(Exited) as exited:
            stop._handle(signal.SIGTERM, None)
        assert exited.value.args == (128 + signal.SIGTERM,)


def test_a_rank_under_slurm_exits_on_a_repeat_after_the_window(clock, monkeypatch):
    from ftui.runner.faults import StopRequest

    monkeypatch.setenv("SLURM_JOB_ID", "12")
    stop = StopRequest()
    stop._handle(signal.SIGTERM, None)
    clock.now += SIGNAL_REPEAT_S + 1  # a second Stop, long after: exit at once, as today
    with pytest.raises(Exited):
        stop._handle(signal.SIGTERM, None)


class FakeRank:
    def __init__(self) -> None:
        self.got: list[int] = []

    def poll(self):
        return None

    def send_signal(self, sig: int) -> None:
        self.got.append(sig)


@pytest.mark.parametrize("slurm,apart,killed", [(True, 2.0, False), (True, SIGNAL_REPEAT_S + 1, True),
                                                (False, 2.0, True), (False, SIGNAL_REPEAT_S + 1, True)])
def test_the_launcher_forwards_one_stop_and_kills_on_a_later_or_non_slurm_repeat(clock, monkeypatch, slurm, apart, killed):
    from ftui.jobs.spawn import Ranks

    if slurm:
        monkeypatch.setenv("SLURM_JOB_ID", "12")
    else:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    ranks = [FakeRank(), FakeRank()]
    launcher = Ranks(ranks, stop_timeout=60)
    launcher.on_signal(signal.SIGTERM, None)
    assert [r.got for r in ranks] == [[signal.SIGTERM]] * 2 and launcher.kill_at == pytest.approx(clock.now + 60)
    clock.now += apart
    launcher.on_signal(signal.SIGTERM, None)
    expected = [signal.SIGTERM, signal.SIGKILL] if killed else [signal.SIGTERM]
    assert [r.got for r in ranks] == [expected] * 2
    assert launcher.signals == (2 if killed else 1)


@pytest.mark.slow  # CI time: the real cluster's Stop test below sends the same double TERM (slurmstepd, then the launcher)
@pytest.mark.dist
def test_two_ranks_under_slurm_signalled_as_slurmstepd_does_still_save_and_stop(tmp_path):
    """What ``scancel --signal=TERM`` then srun's own TERM do to a step: every process of it
    (supervisor, launcher, both ranks) gets TERM, twice, a second apart; the launcher forwards
    it too. The ranks take it as one Stop: a checkpoint, run_end stopped."""
    import os
    import time

    import psutil

    from conftest import steps_of, tiny_config, wait_for
    from ftui.jobs.launch import prepare_run, start_run
    from ftui.rundir.checkpoints import checkpoints
    from ftui.rundir.event_reader import read_all
    from ftui.rundir.paths import EVENTS_FILE

    cfg = tiny_config(tmp_path, engine="ddp", nproc_per_node=2, max_steps=400, save_steps=1000, run_name="slurmstop")
    run_dir = prepare_run(cfg)
    info = start_run(run_dir, cfg, extra_env={"SLURM_JOB_ID": "4242"})
    assert wait_for(lambda: len(steps_of(read_all(run_dir / EVENTS_FILE))) >= 2, 180)
    sup = psutil.Process(info["pid"])
    # the ranks first (slurmstepd's TERM), then the launcher (which forwards it to them again)
    tree = sorted([sup, *sup.children(recursive=True)], key=lambda p: "ftui.runner" not in " ".join(p.cmdline()))
    assert sum("ftui.runner" in " ".join(p.cmdline()) for p in tree) == 2
    for _ in range(2):
        for p in tree:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.2)
    assert wait_for(lambda: not sup.is_running() or sup.status() == psutil.STATUS_ZOMBIE, 180)
    events = read_all(run_dir / EVENTS_FILE)
    assert events[-1]["event"] == "run_end" and events[-1]["status"] == "stopped", events[-1]
    last = steps_of(events)[-1]["step"]
    assert [s for s, _ in checkpoints(run_dir)] == [last]
    log = (run_dir / "train.log").read_text()
    assert log.count("finishing the current step") == 2  # once per rank, however many TERMs it got
    assert os.environ.get("SLURM_JOB_ID") is None  # only the job's processes had it


# --- The batch step (ftui.jobs.slurm_batch) with fake srun / scancel / scontrol on PATH: each
# records its argv in calls.log; scancel --signal=TERM signals the fake step as slurmstepd would;
# the fake step writes run_end stopped on TERM (as the ranks do); scontrol show job answers
# with the state the test leaves in state.txt.

FAKE_SRUN = """#!/bin/bash
echo "srun $*" >> "$FAKES/calls.log"
trap 'printf "%s\\n" "{\\"v\\": 1, \\"t\\": $(date +%s), \\"event\\": \\"run_end\\", \\"status\\": \\"stopped\\", \\"reason\\": \\"x\\"}" >> "$RUN/events.jsonl"; exit 0' TERM
echo $$ > "$FAKES/step.pid"
[ -f "$FAKES/step_dies" ] && exit 143  # its task died of the TERM before any rank ran
while true; do sleep 0.1; done
"""
FAKE_SCANCEL = """#!/bin/bash
echo "scancel $*" >> "$FAKES/calls.log"
[ "$1" = "--signal=TERM" ] && kill -TERM "$(cat "$FAKES/step.pid")"
exit 0
"""
FAKE_SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$FAKES/calls.log"
if [ "$1" = "requeue" ]; then
  [ -f "$FAKES/requeue_refused" ] && { echo "Access/permission denied" >&2; exit 1; }
  # Slurm requeues, and ends the job's processes (this one too) before it can answer
  [ -f "$FAKES/requeue_killed" ] && { echo 1 > "$FAKES/restarts.txt"; kill -KILL $$; }
  exit 0
fi
echo "JobId=$SLURM_JOB_ID JobName=ftui-t UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState=$(cat "$FAKES/state.txt") Reason=None Dependency=(null) Requeue=1 Restarts=$(cat "$FAKES/restarts.txt" 2>/dev/null || echo 0) BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:09 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-28T19:26:00 EligibleTime=2026-11-28T19:26:00 StartTime=2026-11-28T19:26:01 EndTime=2026-11-28T19:26:10 NodeList=vm BatchHost=vm"
"""


@pytest.fixture
def fake_slurm(tmp_path):
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scancel", FAKE_SCANCEL), ("scontrol", FAKE_SCONTROL)):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    (fakes / "state.txt").write_text("RUNNING")
    return fakes


def start_batch(tmp_path, fakes, stop_first: bool = False, **cfg):
    import os
    import subprocess
    import sys

    from conftest import tiny_config, wait_for
    from ftui.jobs.launch import prepare_run

    run = prepare_run(tiny_config(tmp_path, **cfg).model_copy(update={"launcher": "slurm"})).resolve()
    env = dict(os.environ, PATH=f"{fakes}:{os.environ['PATH']}", FAKES=str(fakes), RUN=str(run), SLURM_JOB_ID="77")
    env.pop("SLURM_RESTART_COUNT", None)
    if stop_first:  # a Stop asked for while the job started
        (run / "stop_requested").write_text("1\n")
    proc = subprocess.Popen([sys.executable, "-m", "ftui.jobs.slurm_batch", str(run)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert wait_for(lambda: (fakes / "step.pid").exists(), 60), proc.communicate(timeout=60)
    return run, proc


def calls(fakes) -> list[str]:
    return (fakes / "calls.log").read_text().splitlines()


@pytest.mark.parametrize("refused,killed", [(False, False), (True, False), (False, True)])
def test_the_time_limit_warning_checkpoints_then_requeues_the_job(tmp_path, fake_slurm, refused, killed):
    if refused:
        (fake_slurm / "requeue_refused").touch()
    if killed:
        (fake_slurm / "requeue_killed").touch()
    run, proc = start_batch(tmp_path, fake_slurm)
    proc.send_signal(signal.SIGUSR1)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    made = calls(fake_slurm)
    assert made[0].startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=1 ") and f"ftui.jobs.slurm_node {run}" in made[0]
    assert made[1:3] == ["scancel --signal=TERM 77", "scontrol requeue 77"]
    assert made[3:] == (["scontrol -o show job 77"] if refused or killed else [])  # did Slurm requeue it after all?
    if refused:  # not allowed on this cluster: the run stays stopped and says how to go on
        assert "scontrol requeue 77 failed (Access/permission denied)" in out and f"ftui train --resume {run}" in out
        assert not (run / "requeue_requested").exists()
    else:
        assert (run / "requeue_requested").exists() and "requeued job 77" in out


def test_the_warning_without_slurm_requeue_is_a_stop(tmp_path, fake_slurm):
    run, proc = start_batch(tmp_path, fake_slurm, slurm_requeue=False)
    proc.send_signal(signal.SIGUSR1)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert calls(fake_slurm)[1:] == ["scancel --signal=TERM 77"]
    assert not (run / "requeue_requested").exists() and "slurm_requeue is off" in out


def test_a_stop_during_the_warning_is_not_requeued(tmp_path, fake_slurm):
    run, proc = start_batch(tmp_path, fake_slurm)
    (run / "stop_requested").write_text("1\n")
    proc.send_signal(signal.SIGUSR1)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "not requeued: a Stop was asked for" in out
    assert calls(fake_slurm)[1:] == ["scancel --signal=TERM 77"]
    assert not (run / "requeue_requested").exists()


def test_slurm_ending_the_job_is_recorded_in_the_run(tmp_path, fake_slurm):
    import json
    import os

    run, proc = start_batch(tmp_path, fake_slurm)
    (fake_slurm / "state.txt").write_text("CANCELLED")  # plain scancel: Slurm's state first, then TERM to all
    proc.send_signal(signal.SIGTERM)
    os.kill(int((fake_slurm / "step.pid").read_text()), signal.SIGTERM)  # slurmstepd's TERM to the step
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out  # the ranks stopped
    end = json.loads((run / "slurm_end.json").read_text())
    assert end["state"] == "CANCELLED" and end["job_id"] == "77" and "Slurm ended job 77: CANCELLED" in out
    assert "scontrol -o show job 77" in calls(fake_slurm)


# --- On the real test cluster (tests/slurm_cluster.py): runs started as a user starts them
# (ftui.ops.start: slurm.sh, the probe, sbatch; tests/slurm_jobs.py), then followed, stopped and
# signalled as ftui, Slurm and its users do.

STEPS = 12


@pytest.fixture(scope="module")
def submitted_run(slurm_cluster, tmp_path_factory):
    """(a) A 2-rank gloo run through sbatch that waits in the queue for a few seconds first
    (``--begin``: Reason BeginTime), left to complete: also the uninterrupted reference the
    requeued run's losses are compared with."""
    from slurm_jobs import slurm_run_config, start_on_slurm

    return start_on_slurm(slurm_run_config(tmp_path_factory.mktemp("completed"), max_steps=STEPS,
                                           slurm_sbatch_lines=["--begin=now+3"]))


@pytest.fixture(scope="module")
def completed_run(slurm_cluster, submitted_run):
    run, job = submitted_run
    return run, job, slurm_cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 600)


async def test_a_run_submitted_to_slurm_is_followed_from_queued_to_completed(slurm_cluster, submitted_run, tmp_path):
    """The dashboard (pilot) and ``ftui watch`` follow the run from the queue (Slurm's reason)
    through its two ranks to completed; the run's own files say how it ended."""
    from ftui.rundir.launch_record import read_launch_info
    from slurm_jobs import lives, output, slurm_end
    from tests.test_tui_pilot import make_app, text_of, until

    run, job_id = submitted_run
    watch = subprocess.Popen([sys.executable, "-m", "ftui.cli.main", "watch", str(run)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        app = make_app(tmp_path, attach=run)
        async with app.run_test(size=(120, 40)) as pilot:
            dash = app.screen
            await until(pilot, lambda: dash.view is not None and dash.view.status == "queued", 60)
            header = text_of(dash.query_one("#run-header"))
            assert f"Slurm job {job_id}" in header and "BeginTime" in header, header
            await until(pilot, lambda: dash.view.status == "completed", 600)
            assert dash.view.step == STEPS
        said, _ = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert watch.returncode == 0, said
    assert "queued" in said and "BeginTime" in said and "completed" in said, said
    job = slurm_cluster.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 120)
    assert job["JobState"] == "COMPLETED", output(run, job_id)[-3000:]
    [life] = lives(run)
    assert life[0]["world_size"] == 2 and life[-1]["event"] == "run_end" and life[-1]["status"] == "completed"
    assert [e["step"] for e in life if e["event"] == "step"] == list(range(1, STEPS + 1))
    assert (run / "final").is_dir() and (run / "slurm.sh").is_file()
    info = read_launch_info(run)
    assert info["scheduler"]["job_id"] == job_id and info["restarts"] == 0 and info["nodes"] == [job["NodeList"]]
    assert "node 0 of 1" in (run / "train.log").read_text()
    assert slurm_end(run) is None  # Slurm did not end it: the run's own run_end says how it ended


def test_stop_asks_the_ranks_to_save_and_a_second_stop_cancels(slurm_cluster, tmp_path):
    """(b) ftui's Stop (``scancel --signal=TERM``): every step process gets TERM from slurmstepd,
    and the launcher's forward on top; the ranks save and write run_end stopped; the batch step
    exits 0, so Slurm says COMPLETED."""
    from ftui.ops.control import stop
    from ftui.rundir.checkpoints import checkpoints
    from ftui.rundir.follower import summarize_run
    from slurm_jobs import lives, slurm_run_config, start_on_slurm, wait_steps

    run, job = start_on_slurm(slurm_run_config(tmp_path, max_steps=2000))
    wait_steps(run, job, 2)
    assert f"Slurm job {job}" in stop(run)
    assert slurm_cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 300)["JobState"] == "COMPLETED"
    [life] = lives(run)
    assert life[-1]["event"] == "run_end" and life[-1]["status"] == "stopped", life[-1]
    last = [e for e in life if e["event"] == "step"][-1]["step"]
    assert 2 <= last < 2000 and [s for s, _ in checkpoints(run)] == [last]
    assert summarize_run(run).status == "stopped"


def test_the_time_limit_warning_checkpoints_requeues_and_resumes_exactly(slurm_cluster, completed_run, tmp_path):
    """(c) The warning (``scancel -b --signal=USR1``, what ``--signal=B:USR1@S`` sends, without
    waiting for it): a checkpoint, ``scontrol requeue`` (the same job id, Restarts=1), and the
    second life resumes from it and completes with the losses of a run never interrupted."""
    from ftui.rundir.launch_record import read_launch_info
    from slurm_jobs import lives, output, slurm_run_config, start_on_slurm, wait_output, wait_steps

    reference_run = completed_run[0]
    reference = {e["step"]: e["loss"] for e in lives(reference_run)[0] if e["event"] == "step"}
    run, job = start_on_slurm(slurm_run_config(tmp_path, max_steps=STEPS))
    wait_steps(run, job, 2)
    slurm_cluster.run("scancel", "-b", "--signal=USR1", job)
    wait_output(run, job, f"requeued job {job}", 300)
    end = slurm_cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 600)
    assert end["JobState"] == "COMPLETED" and end["Restarts"] == "1", output(run, job)[-3000:]
    first, second = lives(run)
    assert first[-1]["status"] == "stopped"
    stopped_at = [e["step"] for e in first if e["event"] == "step"][-1]
    assert stopped_at < STEPS and second[0]["resumed_from_step"] == stopped_at
    assert second[-1]["status"] == "completed"
    resumed = {e["step"]: e["loss"] for e in second if e["event"] == "step"}
    assert sorted(resumed) == list(range(stopped_at + 1, STEPS + 1))
    assert [resumed[s] for s in sorted(resumed)] == pytest.approx([reference[s] for s in sorted(resumed)], rel=1e-5)
    info = read_launch_info(run)
    assert info["restarts"] == 1 and info["resumed_from"] == str(run / "checkpoints" / f"step-{stopped_at}")
    assert info["scheduler"]["job_id"] == job and "first_start_time" in info
    assert not (run / "requeue_requested").exists()  # the second life took it away


def test_plain_scancel_reads_cancelled_not_died(slurm_cluster, tmp_path):
    """(d) ``scancel JOB`` from outside: Slurm's verdict, CANCELLED, is kept in the run, which
    reads cancelled (its processes are gone, but Slurm said why)."""
    from conftest import wait_for
    from ftui.rundir.follower import summarize_run
    from slurm_jobs import output, slurm_end, slurm_run_config, start_on_slurm, wait_output

    run, job = start_on_slurm(slurm_run_config(tmp_path, max_steps=2000))
    wait_output(run, job, f"job {job}, life 1")  # the batch step handles TERM from here on
    slurm_cluster.run("scancel", job)
    slurm_cluster.wait_state(job, {"CANCELLED"}, 120)
    # kept by the batch step as Slurm ends the job (else by the first reader that sees the end)
    assert wait_for(lambda: slurm_end(run) is not None, 60), output(run, job)[-3000:]
    assert slurm_end(run)["state"] == "CANCELLED" and slurm_end(run)["job_id"] == job
    assert wait_for(lambda: summarize_run(run).status == "cancelled", 60), summarize_run(run).status
    summary = summarize_run(run)
    assert f"job {job}" in summary.reason and summary.hint, (summary.status, summary.reason)


@pytest.mark.slow
def test_a_real_time_limit_warns_checkpoints_and_requeues(slurm_cluster, tmp_path):
    """``slurm_time: 2`` with ``slurm_warn_s: 60`` (``--time=2 --signal=B:USR1@60``): Slurm's own
    warning, some 60-80 s before the limit."""
    from conftest import wait_for
    from slurm_jobs import lives, output, slurm_end, slurm_run_config, start_on_slurm, wait_output

    run, job = start_on_slurm(slurm_run_config(tmp_path, max_steps=100000, save_steps=100000, slurm_time="2", slurm_warn_s=60))
    wait_output(run, job, f"requeued job {job}", 240)
    assert wait_for(lambda: len(lives(run)) == 2 and any(e["event"] == "step" for e in lives(run)[1]), 300), output(run, job)[-3000:]
    first, second = lives(run)
    assert first[-1]["status"] == "stopped"
    assert second[0]["resumed_from_step"] == [e["step"] for e in first if e["event"] == "step"][-1]
    assert slurm_cluster.job(job)["Restarts"] == "1"
    slurm_cluster.run("scancel", job)
    assert wait_for(lambda: (slurm_end(run) or {}).get("state") == "CANCELLED", 120), output(run, job)[-3000:]


def test_a_stop_that_ended_the_step_before_its_ranks_ran_reads_stopped(tmp_path, fake_slurm):
    from ftui.rundir.event_reader import read_all

    (fake_slurm / "step_dies").touch()
    run, proc = start_batch(tmp_path, fake_slurm)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and read_all(run / "events.jsonl") == []  # no Stop: srun's failure stands

    (tmp_path / "again").mkdir()
    (fake_slurm / "step.pid").unlink()
    (fake_slurm / "calls.log").unlink()
    run, proc = start_batch(tmp_path / "again", fake_slurm, stop_first=True)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    end = read_all(run / "events.jsonl")[-1]
    assert end["event"] == "run_end" and end["status"] == "stopped"
