"""Issue 39, finding 4: files ftui writes where a user named (ftui data --dump OUT, the form's
Save, a chat's /save) never follow a link planted beside them and use no predictable
temporary name. The attack itself runs with a second, unprivileged local user created for
the test where the machine allows it (root and useradd); a planted link of our own, which
shows the same thing, runs everywhere."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import ROOT
from ftui.safety.files import NotARegularFile, replacing, write_text

PRECIOUS = "my thesis, no copy elsewhere\n"


def ftui_data_dump(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", "--preset", "demo", "--set", "max_samples=4", "--dump", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_a_planted_part_link_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    out = tmp_path / "out.jsonl"
    (tmp_path / "out.jsonl.part").symlink_to(victim)
    proc = ftui_data_dump(out)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == PRECIOUS
    assert out.is_file() and not out.is_symlink() and len(out.read_text().splitlines()) == 4
    assert (tmp_path / "out.jsonl.part").is_symlink()  # not ours: left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.part", "victim.txt"]  # no temporary file left


def test_a_link_at_the_dump_name_is_still_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    out = tmp_path / "out.jsonl"
    out.symlink_to(victim)
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", "--preset", "demo", "--dump", str(out), "--force"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert victim.read_text() == PRECIOUS and out.is_symlink()


def _can_add_users() -> str | None:
    """Why the two-user test cannot run here, None when it can."""
    if os.geteuid() != 0:
        return "needs root to create a second local user (useradd)"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "useradd / userdel are not installed"
    return None


@pytest.fixture
def other_user():
    """A throwaway unprivileged local user, removed after the test."""
    reason = _can_add_users()
    if reason:
        pytest.skip("the attack needs a second local user, and none can be made here: {why}".format(why=reason))
    name = "ftuiatk" + uuid.uuid4().hex[:8]
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip("the attack needs a second local user, and useradd failed here: {why}".format(why=made.stderr.strip()))
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_another_user_cannot_make_ftui_data_overwrite_our_file(tmp_path, other_user):
    """The attack of the issue: in a shared sticky directory (mode 1777, like /tmp) another
    user plants OUT.part as a link to a file of ours; ftui data --dump OUT must leave that file
    as it was. (With fs.protected_symlinks=1 the kernel also refuses to follow such a link; the
    planted-link test above shows ftui's own behaviour everywhere.)"""
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    shared = Path(tempfile.mkdtemp(prefix="ftui-shared-", dir="/tmp"))
    try:
        os.chmod(shared, 0o1777)
        out = shared / "out.jsonl"
        # a link needs no access to what it names: the victim may sit in our private directory
        planted = subprocess.run(["ln", "-s", str(victim), str(shared / "out.jsonl.part")], user=other_user.pw_uid,
                                 group=other_user.pw_gid, extra_groups=[], capture_output=True, text=True)
        assert planted.returncode == 0, planted.stderr
        assert os.lstat(shared / "out.jsonl.part").st_uid == other_user.pw_uid
        proc = ftui_data_dump(out)
        assert victim.read_text() == PRECIOUS
        assert proc.returncode == 0, proc.stderr
        assert out.is_file() and os.lstat(out).st_uid == os.geteuid()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_replacing_writes_a_new_file_and_renames_it(tmp_path):
    target = tmp_path / "saved.yaml"
    target.write_text("old\n")
    with replacing(target) as fh:
        fh.write("new\n")
        assert target.read_text() == "old\n"  # complete before it replaces anything
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["saved.yaml"]


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "saved.yaml"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with replacing(target) as fh:
            fh.write("half")
            raise RuntimeError("the child failed")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["saved.yaml"]


def test_a_link_or_a_directory_at_the_target_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    link = tmp_path / "link.yaml"
    link.symlink_to(victim)
    with pytest.raises(NotARegularFile, match="not a regular file"):
        write_text(link, "overwritten\n")
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(NotARegularFile):
        write_text(tmp_path / "dir.yaml", "x")
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(NotARegularFile):
        write_text(dangling, "x")
    assert victim.read_text() == PRECIOUS and not (tmp_path / "nowhere").exists()


def test_the_file_gets_the_mode_open_would_have_given(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644


def test_a_chat_saved_onto_a_link_does_not_write_through_it(tmp_path):
    """ftui chat's /save and the chat screen's save go through Conversation.save."""
    from ftui.jobs.chat_client import Conversation, GenerationSettings

    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    link = tmp_path / "chat.json"
    link.symlink_to(victim)
    conv = Conversation([{"role": "user", "content": "hi"}])
    with pytest.raises(OSError, match="not a regular file"):
        conv.save(str(link), GenerationSettings(), "demo")
    assert victim.read_text() == PRECIOUS
    conv.save(str(tmp_path / "new.json"), GenerationSettings(), "demo")
    assert '"hi"' in (tmp_path / "new.json").read_text()


async def test_the_forms_save_onto_a_link_does_not_write_through_it(tmp_path, monkeypatch):
    """The launch form's Save (F4) writes a typed path through ftui.safety.files."""
    from tests.test_tui_pilot import make_app, until

    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    link = tmp_path / "saved.yaml"
    link.symlink_to(victim)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.save_yaml(str(link), screen.current_config_dict())
        await until(pilot, lambda: any("cannot save" in str(n.message) for n in app._notifications))
        assert any("not a regular file" in str(n.message) for n in app._notifications)
    assert victim.read_text() == PRECIOUS and link.is_symlink()
