"""Reading what Slurm says of a job (ftui.rundir.slurm_state) and keeping its verdict in the run
(ftui.rundir.slurm_end): recorded scontrol lines of every state, hostile text, a fake scontrol."""

from __future__ import annotations

import json
import time

import pytest

from ftui.rundir import slurm_state
from ftui.rundir.slurm_end import read_slurm_end, record_slurm_end, slurm_ending
from ftui.rundir.slurm_state import parse_job, query_job, scontrol_fields, slurm_scheduler, SlurmJob, SlurmUnavailable
from tests.fake_slurm import fake_slurm  # noqa: F401  (a fixture)
from tests.slurm_lines import LINES


def _local(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("name, job_id, state, reason, live, restarts", [
    ("pending_resources", "2", "PENDING", "Resources", True, 0),
    ("held", "8", "PENDING", "JobHeldUser", True, 0),
    ("requeued", "7", "PENDING", "BeginTime", True, 1),
    ("running", "1", "RUNNING", None, True, 0),
    ("completed", "5", "COMPLETED", None, False, 0),
    ("failed", "4", "FAILED", "NonZeroExitCode", False, 0),
    ("cancelled", "1", "CANCELLED", None, False, 0),
    ("timeout", "6", "TIMEOUT", "TimeLimit", False, 0),
])
def test_recorded_lines_parse(name, job_id, state, reason, live, restarts):
    job = parse_job(LINES[name], job_id)
    assert job is not None
    assert (job.state, job.reason, job.live, job.restarts) == (state, reason, live, restarts)


def test_times_are_local_and_unknown_is_none():
    pending = parse_job(LINES["pending_resources"], "2")
    assert pending.start == _local("2027-11-28T19:01:33") and pending.end is None  # EndTime=Unknown
    assert pending.nodelist is None  # NodeList= (none yet)
    held = parse_job(LINES["held"], "8")
    assert held.start is None  # StartTime=Unknown: Slurm gives no estimate
    done = parse_job(LINES["timeout"], "6")
    assert done.time_limit == "00:01:00" and done.exit_code == "0:15" and done.nodelist == "vm"
    assert done.end is not None and done.start is not None and done.end > done.start


def test_a_line_of_another_job_is_not_this_one():
    assert parse_job(LINES["running"], "2") is None
    assert parse_job("", "1") is None
    assert parse_job("garbage without keys", "1") is None


def test_hostile_values_cannot_pass_for_the_state():
    line = LINES["running"]
    # a job name with spaces and a look-alike state; paths with spaces, '=' and look-alikes after
    line = line.replace("JobName=wrap", "JobName=x JobState=COMPLETED Restarts=9 y")
    line = line.replace("WorkDir=/tmp/slurm-read", "WorkDir=/tmp/my runs JobState=FAILED/a=b")
    line = line.replace("Reason=None", "Reason=None")
    job = parse_job(line, "1")
    assert (job.state, job.restarts) == ("RUNNING", 0)
    fields = scontrol_fields(line)
    assert fields["JobName"] == "x JobState=COMPLETED Restarts=9 y"
    assert fields["WorkDir"].startswith("/tmp/my runs")


def test_hostile_words_are_dropped():
    line = LINES["pending_resources"].replace("Reason=Resources", "Reason=\x1b[31mevil\x07")
    line = line.replace("JobState=PENDING", "JobState=PENDING")
    job = parse_job(line, "2")
    assert job.reason is None  # control characters: not a word Slurm writes
    assert parse_job(LINES["running"].replace("JobState=RUNNING", "JobState=running;rm"), "1") is None
    assert parse_job(LINES["running"].replace("Restarts=0", "Restarts=" + "9" * 50), "1").restarts == 0
    assert parse_job(LINES["running"].replace("StartTime=2026-11-28T19:01:33", "StartTime=9999-99-99T99:99:99"), "1").start is None


def test_query_reads_caches_and_forgets(fake_slurm):
    fake_slurm.set("2", "pending_resources")
    job = query_job("2")
    assert job.state == "PENDING" and job.reason == "Resources"
    assert query_job("2").state == "PENDING" and len(fake_slurm.calls()) == 1  # cached: one call per refresh
    (fake_slurm.jobs / "2").write_text(LINES["running"].replace("JobId=1 ", "JobId=2 ") + "\n")
    assert query_job("2", max_age=0).state == "RUNNING" and len(fake_slurm.calls()) == 2
    assert query_job("99") is None  # Invalid job id: Slurm does not know it (any more)
    assert query_job("12; rm -rf /") is None and len(fake_slurm.calls()) == 3  # not a job id: never asked


def test_a_hung_controller_is_waited_for_once(fake_slurm):
    """scontrol that does not answer: unavailable after the timeout, then at once for every job
    for a while (the runs list would otherwise wait a timeout per run per refresh)."""
    script = fake_slurm.jobs.parent / "fakebin" / "scontrol"
    script.write_text("#!/bin/sh\necho \"$@\" >> %s/calls\nexec sleep 30\n" % fake_slurm.jobs)
    with pytest.raises(SlurmUnavailable, match="did not answer"):
        query_job("2", timeout=0.5)
    with pytest.raises(SlurmUnavailable):
        query_job("3", timeout=0.5)
    assert len(fake_slurm.calls()) == 1


def test_query_unavailable(fake_slurm, monkeypatch):
    fake_slurm.down()
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        query_job("2")
    monkeypatch.setenv("PATH", "/nonexistent")
    slurm_state.clear_cache()
    with pytest.raises(SlurmUnavailable, match="not on the PATH"):
        query_job("2")


def test_scheduler_record():
    assert slurm_scheduler({"scheduler": {"kind": "slurm", "job_id": "12"}}) == {"kind": "slurm", "job_id": "12"}
    for bad in ({}, {"scheduler": None}, {"scheduler": {"kind": "pbs", "job_id": "1"}},
                {"scheduler": {"kind": "slurm", "job_id": 12}}, {"scheduler": {"kind": "slurm", "job_id": "1_2"}}):
        assert slurm_scheduler(bad) is None


def _job(state: str, **kw) -> SlurmJob:
    base = dict(job_id="12", state=state, reason="TimeLimit", start=1.7e9, end=1.7e9 + 60, time_limit="00:01:00",
                restarts=1, exit_code="0:15", nodelist="vm")
    base.update(kw)
    return SlurmJob(**base)


def test_slurm_end_round_trip_and_untrusted(tmp_path):
    record_slurm_end(tmp_path, _job("RUNNING"))
    assert read_slurm_end(tmp_path) is None  # a live job has no verdict
    record_slurm_end(tmp_path, _job("TIMEOUT"))
    kept = read_slurm_end(tmp_path)
    assert kept == {"job_id": "12", "state": "TIMEOUT", "reason": "TimeLimit", "restarts": 1, "exit_code": "0:15",
                    "t": 1.7e9 + 60}
    assert [p.name for p in tmp_path.iterdir()] == ["slurm_end.json"]  # no temp file left
    for bad in ('[]', '{"job_id": 12, "state": "TIMEOUT"}', '{"job_id": "12", "state": "timeout; x"}',
                '{"job_id": "12", "state": "TIMEOUT", "reason": "\\u001b[31m"}', '{"job_id": "12", "state": "TIMEOUT", "t": 1e300}',
                "not json", json.dumps({"job_id": "12", "state": "TIMEOUT", "pad": "x" * 5000})):
        (tmp_path / "slurm_end.json").write_text(bad)
        assert read_slurm_end(tmp_path) is None, bad


@pytest.mark.parametrize("state, words", [
    ("TIMEOUT", ("time limit", "slurm_time", "slurm_warn_s")), ("PREEMPTED", ("preempted", "slurm_requeue", "--resume")),
    ("OUT_OF_MEMORY", ("memory", "slurm_mem_per_task", "batch size")), ("CANCELLED", ("scancel", "--resume")),
    ("NODE_FAIL", ("node", "--resume")), ("FAILED", ("failed", "RUN/slurm-12.out", "train.log")),
    ("BOOT_FAIL", ("boot",)), ("DEADLINE", ("deadline",)), ("SPECIAL_EXIT", ("SPECIAL_EXIT", "slurm-12.out")),
])
def test_each_ending_says_what_to_do(state, words):
    reason, hint = slurm_ending(state, "12")
    assert "12" in reason
    for word in words:
        assert word in reason + " " + hint


def test_launch_record_keeps_only_a_sound_scheduler_nodes_and_restarts(tmp_path):
    from ftui.rundir.launch_record import read_launch_record

    sound = {"scheduler": {"kind": "slurm", "job_id": "12", "cluster": "c", "submit_host": "login1", "submitted": 1.7e9,
                           "script": "slurm.sh"}, "nodes": ["n1", "n2"], "restarts": 1, "start_time": 1.7e9}
    (tmp_path / "launch.json").write_text(json.dumps(sound))
    assert read_launch_record(tmp_path) == (sound, None)
    for field, bad in [("scheduler", {"kind": "slurm", "job_id": "12 && x"}), ("scheduler", {"kind": "slurm", "job_id": "1", "submitted": 1e300}),
                       ("scheduler", {"kind": "slurm", "job_id": "1", "cluster": "\x1b[2J"}), ("scheduler", "slurm"),
                       ("nodes", "n1"), ("nodes", ["n1", 3]), ("nodes", ["\x07"]), ("restarts", -1), ("restarts", True)]:
        (tmp_path / "launch.json").write_text(json.dumps({**sound, field: bad}))
        info, problem = read_launch_record(tmp_path)
        assert field not in info and field in problem, (field, bad)
