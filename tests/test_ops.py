"""The operations layer (ftui.ops): one typed error per refusal, carrying the user's message,
and no printing (the CLI and the app render them); the CLI's modules import no other command's
module through ftui.cli.main (no cli <-> cli export circle); one chat-reply decoder."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import tiny_config
from fixtures_runs import T0
from ftui.jobs.launch import prepare_run
from ftui.ops import errors
from ftui.ops.resume import ResumeRequest, prepare_resume
from ftui.rundir.events import make_event

CLI = Path(__file__).resolve().parent.parent / "ftui" / "cli"


def _ended(run: Path, status: str, checkpoint: bool = True) -> Path:
    if checkpoint:
        ckpt = run / "checkpoints" / "step-2"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text(json.dumps({
            "format": 1, "step": 2, "engine": "single", "world_size": 1, "micro_batch_size": 4,
            "accumulation": 1, "max_steps": 4, "files": {}}))
    (run / "events.jsonl").write_text(json.dumps(make_event("run_end", t=T0, status=status, reason=status)) + "\n")
    return run


@pytest.mark.parametrize("case,error,says", [
    ("missing", errors.RunNotFound, "no run"),
    ("completed", errors.NothingToResume, "there is nothing to resume"),
    ("no checkpoint", errors.CheckpointRefused, "checkpoint"),
    ("busy", errors.RunLocked, "already has a job running"),
])
def test_a_refused_resume_raises_its_own_error_with_the_message_and_prints_nothing(tmp_path, capfd, case, error, says):
    import os

    from ftui.rundir.run_dir import RunDir

    run = prepare_run(tiny_config(tmp_path, max_steps=4))
    _ended(run, "completed" if case == "completed" else "stopped", checkpoint=case != "no checkpoint")
    held = RunDir(run).lock() if case == "busy" else None
    try:
        with pytest.raises(error) as refused:
            prepare_resume(ResumeRequest(run="nope-nothing" if case == "missing" else str(run), runs_root=str(tmp_path / "runs")))
    finally:
        if held is not None:
            os.close(held)
    assert isinstance(refused.value, errors.OpError) and not refused.value.failed
    assert says in " ".join(refused.value.message.split()).lower() or says in refused.value.message, refused.value.message
    assert capfd.readouterr() == ("", "")


def test_an_accepted_resume_returns_its_notices_and_holds_the_lock_until_started(tmp_path, capfd):
    import os

    from ftui.rundir.run_dir import RunBusy, RunDir

    run = _ended(prepare_run(tiny_config(tmp_path, max_steps=4)), "failed")
    prepared = prepare_resume(ResumeRequest(run=str(run), overrides={"learning_rate": 1e-3}))
    try:
        assert prepared.checkpoint.name == "step-2" and prepared.cfg.learning_rate == 1e-3
        assert [n.level for n in prepared.notices] == ["note"] and "learning_rate" in prepared.notices[0].text
        with pytest.raises(RunBusy):
            RunDir(run).lock(wait_s=0.1)
    finally:
        os.close(prepared.lock)
    assert capfd.readouterr() == ("", "")


def test_no_cli_module_imports_ftui_cli_main():
    """main dispatches to the commands' modules; none of them imports it back (cli <-> cli
    export was a circle)."""
    importers = []
    for path in CLI.glob("*.py"):
        if path.name == "main.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])] \
                if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module == "ftui.cli":
                names += [f"ftui.cli.{a.name}" for a in node.names]
            if "ftui.cli.main" in names:
                importers.append(path.name)
    assert importers == []


def test_the_chat_reply_decoder_reads_each_kind_and_skips_other_answers():
    from ftui.jobs.chat_reply import Done, Failed, Token, decode_reply

    assert decode_reply({"id": 2, "type": "token", "text": "hi"}, 2) == Token("hi")
    assert decode_reply({"id": 1, "type": "token", "text": "old"}, 2) is None  # an earlier answer's
    assert decode_reply({"id": 2, "type": "done", "tokens": 3, "tokens_per_s": 1.5, "stopped": True}, 2) == Done(3, 1.5, True)
    assert decode_reply({"type": "done", "tokens": 3}, 2) == Done(3, 0.0, False)
    assert decode_reply({"type": "exit", "message": "gone"}, 2) == Failed("gone", exited=True)
    assert decode_reply({"id": 2, "type": "error", "message": "bad"}, 2) == Failed("bad")
    assert decode_reply({"id": 2, "type": "loaded"}, 2) is None
