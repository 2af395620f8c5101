"""bench/multi_gpu_plan.py and its arithmetic (bench/comm_model.py), on numbers done by hand: the
multi-GPU figures of bench/README.md ("Several GPUs, on paper") stand on these formulas."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from comm_model import (ALL_GATHER, ALL_REDUCE, EXPOSED, REDUCE_SCATTER, Sizes, Topology, bucket_flushes, ddp, factor,  # noqa: E402
                        fsdp, step_time, zero2, zero3, zero3_kept_layers)

GB = 1e9
ONE_NODE = Topology("8 GPUs", 1, 8, 370 * GB, 0.0, 20e-6, 50e-6)
TWO_NODES = Topology("2 x 8", 2, 8, 370 * GB, 45 * GB, 20e-6, 50e-6)
# the Qwen2.5-1.5B shape as benchlib builds it (Llama architecture, tied): 28 layers of
# 2 x 1536^2 (q, o) + 2 x 1536 x 256 (k, v) + 3 x 1536 x 8960 (MLP) + 2 x 1536 (norms)
LAYER_15B = 2 * 1536**2 + 2 * 1536 * 256 + 3 * 1536 * 8960 + 2 * 1536
EMBED_15B = 151936 * 1536
QWEN_15B = Sizes(params=28 * LAYER_15B + EMBED_15B + 1536, layer=LAYER_15B, layers=28, embed=EMBED_15B, tied=True, hidden=1536)


def test_the_ring_factors():
    assert factor(ALL_REDUCE, 8) == 2 * 7 / 8 and factor(ALL_GATHER, 8) == factor(REDUCE_SCATTER, 8) == 7 / 8
    assert factor(ALL_REDUCE, 1) == 0.0


def test_ddp_all_reduce_of_1_5e9_bf16_gradients_on_8_gpus_sends_5_25_gb_a_gpu():
    nvlink, net = ONE_NODE.bytes_per_gpu(ALL_REDUCE, 1.5e9 * 2)
    assert nvlink == pytest.approx(2 * (7 / 8) * 3 * GB) and nvlink == pytest.approx(5.25 * GB) and net == 0
    # ddp() splits the same bytes into buckets and the embedding's tail: the total is still 2 bytes a parameter
    sizes = Sizes(params=int(1.5e9), layer=50_000_000, layers=28, embed=100_000_000, tied=True, hidden=1536)
    assert sum(c.size for c in ddp(sizes, grad_bytes=2)) == pytest.approx(3 * GB)
    # and 25 MiB buckets: ceil(1.4e9 x 2 / 26,214,400) = 107 for all but the embedding
    assert ddp(sizes, grad_bytes=2)[0].count == math.ceil(1.4e9 * 2 / (25 * 2**20)) == 107
    assert ONE_NODE.seconds(ALL_REDUCE, 3 * GB) == pytest.approx(20e-6 + 5.25 / 370)


def test_two_nodes_are_an_nvlink_phase_and_a_network_phase_on_a_gpus_eighth():
    nvlink, net = TWO_NODES.bytes_per_gpu(ALL_REDUCE, 3 * GB)
    assert nvlink == pytest.approx(5.25 * GB)  # 2 x 7/8 of the tensor within the node
    assert net == pytest.approx(2 * (1 / 2) * 3 * GB / 8)  # 2 x 1/2 of its 3/8 GB share between the 2 nodes: 0.375 GB
    assert TWO_NODES.seconds(ALL_REDUCE, 3 * GB, count=4) == pytest.approx(4 * 50e-6 + 5.25 / 370 + 0.375 / 45)
    nvlink, net = TWO_NODES.bytes_per_gpu(ALL_GATHER, 3 * GB)
    assert (nvlink, net) == (pytest.approx(7 / 8 * 3 * GB), pytest.approx(1 / 2 * 3 * GB / 8))


def test_fsdp_moves_three_times_the_bf16_weights_less_what_the_root_keeps():
    """FSDP2, pure bf16: gather every parameter for forward, the layers again for backward,
    reduce-scatter every gradient; 7/8 of each on 8 GPUs."""
    s = QWEN_15B
    assert s.params == 1_543_656_960 and s.root == EMBED_15B + 1536
    rows = fsdp(s, param_bytes=2, reduce_bytes=2)
    gathered = sum(c.size for c in rows if c.kind == ALL_GATHER)
    reduced = sum(c.size for c in rows if c.kind == REDUCE_SCATTER)
    assert gathered == pytest.approx(2 * (s.params + 28 * LAYER_15B)) and reduced == pytest.approx(2 * s.params)
    t = step_time(rows, ONE_NODE, micro_s=0.344, layer_share=s.layer / s.dense)
    assert t.nvlink_bytes_per_gpu == pytest.approx(7 / 8 * 2 * (2 * s.params + 28 * LAYER_15B))  # 7.70 GB
    assert t.nvlink_bytes_per_gpu / GB == pytest.approx(7.70, abs=0.01)


def test_zero2_all_reduces_its_buckets_and_gathers_the_updated_weights_all_exposed():
    s = QWEN_15B
    rows = zero2(s)
    assert [c.kind for c in rows] == [ALL_REDUCE, ALL_GATHER] and all(c.where == EXPOSED for c in rows)
    assert rows[0].count == 4  # ceil(1.544e9 / 5e8) buckets
    t = step_time(rows, ONE_NODE, micro_s=0.6, layer_share=s.layer / s.dense)
    assert t.nvlink_bytes_per_gpu == pytest.approx(3 * 7 / 8 * 2 * s.params)  # all-reduce (2 x 7/8) + all-gather (7/8)
    comm = 2 * 20e-6 * 4 + 3 * 7 / 8 * 2 * s.params / (370 * GB)
    assert t.exposed_s == pytest.approx(comm) and t.efficiency == pytest.approx(0.6 / (0.6 + comm))
    # with 4 micro batches a step: the all-reduce every micro batch (ftui's unmanaged accumulation), the gather once
    t4 = step_time(rows, ONE_NODE, micro_s=0.6, layer_share=s.layer / s.dense, accumulation=4)
    ar, ag = (ONE_NODE.seconds(c.kind, c.size, c.count) for c in rows)
    assert t4.exposed_s == pytest.approx(4 * ar + ag) and t4.compute_s == pytest.approx(2.4)


def test_ddp_hides_its_buckets_behind_backward_but_not_the_embeddings_gradient():
    s = QWEN_15B
    rows = ddp(s, grad_bytes=2)
    t = step_time(rows, ONE_NODE, micro_s=0.344, layer_share=s.layer / s.dense)
    tail = ONE_NODE.seconds(ALL_REDUCE, EMBED_15B * 2)
    assert t.exposed_s == pytest.approx(tail)  # the buckets' 12 ms fit in backward's 229 ms
    # a backward shorter than the buckets' all-reduce leaves the difference exposed
    short = step_time(rows, ONE_NODE, micro_s=0.003, layer_share=s.layer / s.dense)
    buckets = ONE_NODE.seconds(ALL_REDUCE, rows[0].size, rows[0].count)
    assert short.exposed_s == pytest.approx(tail + buckets - 0.002)
    # accumulation: one all-reduce per step (no_sync before the last micro batch)
    assert step_time(rows, ONE_NODE, micro_s=0.344, layer_share=0.03, accumulation=4).exposed_s == pytest.approx(tail)


def test_zero3_keeps_the_top_layers_its_reuse_distance_allows():
    # the j-th layer from the top is reused after 2 j layers and the LM head: 2 j x 46,795,776 + 233,373,696 <= 1e9 for j <= 8
    assert LAYER_15B == 46_795_776 and zero3_kept_layers(QWEN_15B) == 9
    rows = zero3(QWEN_15B)
    again = next(c for c in rows if c.what.startswith("layers' parameters again"))
    assert again.size == pytest.approx((28 - 9) * LAYER_15B * 2)
    assert sum(c.size for c in rows if c.kind == REDUCE_SCATTER) == pytest.approx(2 * QWEN_15B.params)


def test_layer_collectives_hide_behind_their_layer_until_they_outgrow_it():
    s = QWEN_15B
    rows = fsdp(s, param_bytes=2, reduce_bytes=2)
    exposed_only = sum(ONE_NODE.seconds(c.kind, c.size, c.count) for c in rows if c.where == EXPOSED)
    assert step_time(rows, ONE_NODE, micro_s=0.344, layer_share=s.layer / s.dense).exposed_s == pytest.approx(exposed_only)
    # no compute beside them: every layer's gathers and reductions are exposed too
    none = step_time(rows, ONE_NODE, micro_s=0.0, layer_share=s.layer / s.dense)
    assert none.exposed_s == pytest.approx(none.comm_s)


def test_the_plan_runs_and_reads_measured_cases(tmp_path):
    """End to end (the planner's verdicts included), and a measured DDP case beside its prediction:
    efficiency = its tokens/s over 8 x the single-GPU reference's in the same files."""
    measured = {"cases": {
        "pure_bf16_packed_compile_liger_mb8_fa2": {"status": "completed", "tokens_per_s": 40000.0, "mfu": 0.4,
                                                   "settings": {"per_device_train_batch_size": 8}},
        "ddp_pure_bf16_packed_compile_liger_mb8_fa2": {"status": "completed", "tokens_per_s": 300000.0, "mfu": 0.37, "peak_bytes": 40 * 2**30,
                                                       "planned_bytes": 42 * 2**30,
                                                       "settings": {"engine": "ddp", "nproc_per_node": 8, "per_device_train_batch_size": 8}}}}
    (tmp_path / "gpu_set_x8.json").write_text(json.dumps(measured))
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, str(BENCH / "multi_gpu_plan.py"), "--measured", str(tmp_path / "gpu_set_x8.json"),
                           "--out", str(out)], capture_output=True, text=True, timeout=300, check=True)
    assert "| qwen2.5-7b | fsdp | 16 |" in proc.stdout and "ddp_pure_bf16_packed_compile_liger_mb8_fa2" in proc.stdout
    result = json.loads(out.read_text())
    [row] = result["against_measured"]
    assert row["measured_efficiency"] == pytest.approx(300000 / (8 * 40000), abs=1e-3)
    assert result["references"]["ddp"]["source"] == "--measured"
    assert result["references"]["zero2"]["source"].endswith("run4")  # not measured here: the recorded H100 step
    assert 0.5 < row["measured_over_predicted"] < 1.5
    # the planner's verdicts, per rank: the 7 B's full fine-tuning does not fit one 80 GB GPU at micro batch 8
    single_7b = [p for p in result["planner"] if p["shape"] == "qwen2.5-7b" and p["engine"] == "single"]
    assert single_7b and not any(p["fits_80gb"] for p in single_7b if not p["gradient_checkpointing"])
    ddp_8 = next(p for p in result["predictions"] if p["engine"] == "ddp" and p["ranks"] == 8 and p["shape"] == "qwen2.5-1.5b"
                 and p["accumulation"] == 1)
    assert ddp_8["nvlink_bytes_per_gpu"] == pytest.approx(2 * 7 / 8 * 2 * QWEN_15B.params)


def test_zero3_sends_a_bucket_before_the_tensor_that_would_overflow_it():
    # cap 4: [5] alone, [1, 1] together, [5] alone, [3] at the end
    assert bucket_flushes([5, 1, 1, 5, 3], 4) == 4 and bucket_flushes([], 4) == 0 and bucket_flushes([1, 1, 1], 4) == 1
    # one Qwen2.5-1.5B layer against h^2 = 2,359,296 elements: down, up, gate, norm, o alone; v + k
    # together; q, norm: 8 reductions a layer, 226 with the final norm and the embedding
    from multi_gpu_plan import model_shape

    sizes = Sizes.of(model_shape("qwen2.5-1.5b"))
    assert sizes.params == QWEN_15B.params and sum(sizes.backward_order()) == sizes.params
    assert bucket_flushes(list(sizes.layer_tensors), 1536**2) == 8
    assert zero3(sizes)[-1].count == 28 * 8 + 2
