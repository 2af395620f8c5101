"""Launchers are a seam (issue 40): ``launcher_for`` picks the module that starts a node's ranks
(one node: ``local``, ftui.jobs.spawn; several: ``torchrun``), and ``ftui.jobs.launch`` builds
its commands through it, so a new launcher is a module and one line. The commands themselves:
tests/test_launch.py."""

from __future__ import annotations

import sys

from conftest import tiny_config
from ftui.jobs import launch
from ftui.jobs.launchers import launcher_for, local, torchrun


def test_one_node_starts_with_spawn_and_several_with_torchrun(tmp_path):
    one = tiny_config(tmp_path, engine="ddp", nproc_per_node=2)
    two = tiny_config(tmp_path, engine="ddp", nnodes=2, rdzv_endpoint="10.0.0.1:29500")
    assert launcher_for(one) is local and launcher_for(two) is torchrun
    assert launch.other_node_commands(one, tmp_path / "run") == []
    assert launch.other_node_commands(two, tmp_path / "run") == [
        f"ftui train {(tmp_path / 'run').resolve() / 'config.yaml'} --node-rank 1"]


def test_launch_command_is_the_picked_launchers_command(tmp_path, monkeypatch):
    cfg = tiny_config(tmp_path)
    seen = []
    monkeypatch.setattr(local, "command", lambda cfg, run_dir, python, tail: seen.append((python, tail)) or ["launched"])
    assert launch.launch_command(cfg, tmp_path / "run", resume=tmp_path / "ckpt", job="predict") == ["launched"]
    assert seen == [(sys.executable, ["predict", str(tmp_path / "run"), "--resume", str(tmp_path / "ckpt")])]
    assert launch.torchrun_has_shutdown_timeout is torchrun.torchrun_has_shutdown_timeout  # still importable from launch
