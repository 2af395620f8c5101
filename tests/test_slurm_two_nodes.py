"""A run over two Slurm nodes (two slurmd on this host, tests/slurm_cluster.py's slurm_two_nodes):
srun starts ftui.jobs.slurm_node on each, they meet through torchrun's static rendezvous at node
0's NodeAddr on the port derived from the job id, and write one run directory. Its own module:
the two-node cluster's SLURM_CONF replaces the session cluster's while it runs."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_two_slurm_nodes_train_one_run(slurm_two_nodes, tmp_path):
    from ftui.rundir.launch_record import read_launch_info
    from slurm_jobs import lives, output, slurm_run_config, start_on_slurm

    run, job = start_on_slurm(slurm_run_config(tmp_path, nproc_per_node=1, nnodes=2, max_steps=6))
    end = slurm_two_nodes.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 600)
    assert end["JobState"] == "COMPLETED", output(run, job)[-3000:] + (run / "train.log").read_text()[-3000:]
    [life] = lives(run)
    assert life[0]["world_size"] == 2 and life[0]["nodes"] == 2 and life[-1]["status"] == "completed"
    ckpt = run / "checkpoints" / "step-6"
    assert sorted(f.name for f in (ckpt / "state").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    info = read_launch_info(run)
    assert info["nodes"] == ["n1", "n2"] and "--master-addr=127.0.0.1" in info["command"]
    assert f"--master-port={20000 + int(job) % 20000}" in info["command"]
    node1 = (run / "nodes" / "node-1" / "train.log").read_text()
    assert "node 1 of 2" in node1 and "--node-rank=1" in node1
