"""The arithmetic of data-parallel training on several GPUs (issue 41, item 5): what each of ftui's
engines sends per optimizer step, how long that takes on a topology, how much of it hides behind
the computation, and the step time that follows from a measured single-GPU step. No torch and no
measurement here: formulas that ``bench/multi_gpu_plan.py`` fills with ftui's engine settings and
the H100's figures, and that ``tests/test_multi_gpu_plan.py`` checks on numbers done by hand.

A collective over n ranks on a tensor of S bytes (all-reduce: the buffer; all-gather: the gathered
output; reduce-scatter: its input) makes every rank send ``factor(kind, n) * S`` bytes, the factor
being 2(n-1)/n for a ring all-reduce and (n-1)/n for all-gather and reduce-scatter, and takes that
over NCCL's bus bandwidth ("busbw", the figure nccl-tests reports, defined so that it compares
with the link's speed whatever n is), plus a latency per collective. Over several nodes the
collective is hierarchical: within each node over NVLink on the whole tensor (factor of the GPUs
per node), then between nodes over each GPU's own NIC on its 1/g share (factor of the nodes); the
two phases are added, though NCCL pipelines them, so the time is an upper bound there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all_reduce", "all_gather", "reduce_scatter"

# where a collective's time goes, see step_time
PER_LAYER = "per layer"  # beside the next layer's compute (FSDP2 / ZeRO-3 prefetch): only its excess over that counts
IN_BACKWARD = "in backward"  # launched as buckets fill during backward on a stream of its own (DDP): hidden up to backward's length
EXPOSED = "exposed"  # nothing computes beside it: before the first layer, after the last, or on the compute stream itself

MICRO_BATCH, STEP = "micro batch", "step"  # how often it happens
LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down: ZeRO-3 gathers module by module


def factor(kind: str, n: int) -> float:
    """Bytes each rank sends, per byte of the tensor, in a ring collective over ``n`` ranks."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n if kind == ALL_REDUCE else (n - 1) / n


@dataclass(frozen=True)
class Topology:
    """GPUs, how they are linked and how fast (bytes/s, seconds)."""

    name: str
    nodes: int
    gpus_per_node: int
    nvlink_busbw: float  # NCCL busbw within a node (ring all-gather / reduce-scatter / all-reduce)
    net_busbw: float  # what one GPU's own NIC moves between nodes, per direction (unused on one node)
    latency_intra: float  # per collective, one node
    latency_inter: float  # per collective, several nodes

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def bytes_per_gpu(self, kind: str, size: float) -> tuple[float, float]:
        """(over NVLink, over the network) bytes one GPU sends for a collective on ``size`` bytes."""
        if self.nodes == 1:
            return factor(kind, self.gpus_per_node) * size, 0.0
        return factor(kind, self.gpus_per_node) * size, factor(kind, self.nodes) * size / self.gpus_per_node

    def seconds(self, kind: str, size: float, count: int = 1) -> float:
        """Time of ``count`` collectives moving ``size`` bytes between them."""
        if self.ranks <= 1 or size <= 0:
            return 0.0
        nvlink, net = self.bytes_per_gpu(kind, size)
        latency = self.latency_inter if self.nodes > 1 else self.latency_intra
        return count * latency + nvlink / self.nvlink_busbw + (net / self.net_busbw if net else 0.0)


@dataclass(frozen=True)
class Sizes:
    """The parameter counts the traffic depends on (ftui.plan.model_shape.ModelShape's)."""

    params: int  # all of them
    layer: int  # one decoder layer's
    layers: int
    embed: int  # vocab x hidden: the input embedding (and the LM head, the same or another of this size)
    tied: bool
    hidden: int
    layer_tensors: tuple[int, ...] = ()  # one layer's parameter tensors in the order backward finishes them

    @classmethod
    def of(cls, shape) -> "Sizes":
        lin = {name: a * b for name, (a, b) in shape.linear_shapes().items()}
        tensors = (lin["down_proj"], lin["up_proj"], lin["gate_proj"], shape.hidden, lin["o_proj"], lin["v_proj"], lin["k_proj"],
                   lin["q_proj"], shape.hidden)  # MLP, its norm, attention, its norm (no q/k/v biases in these shapes)
        return cls(shape.params, shape.layer_params, shape.layers, shape.embed_params, shape.tied, shape.hidden, tensors)

    def backward_order(self) -> list[int]:
        """Every parameter tensor, in the order its gradient is complete: the LM head (untied), the
        final norm, the layers from the top, the input embedding (tied: the LM head's too)."""
        return ([] if self.tied else [self.embed]) + [self.hidden] + list(self.layer_tensors) * self.layers + [self.embed]

    @property
    def root(self) -> int:
        """What is not in a decoder layer: embeddings, LM head, final norm (FSDP2's root module)."""
        return self.params - self.layers * self.layer

    @property
    def dense(self) -> int:
        """The parameters that take part in matrix products (ftui's FLOPs formula: the input embedding is a lookup)."""
        return self.params - (0 if self.tied else self.embed)


@dataclass(frozen=True)
class Collective:
    """One kind of traffic of an engine: ``count`` collectives on ``size`` bytes in all."""

    what: str
    kind: str
    size: float
    count: int
    where: str  # PER_LAYER, IN_BACKWARD or EXPOSED
    phase: str  # forward, backward, after backward, after the optimizer step
    every: str  # MICRO_BATCH or STEP
    layers: int = 0  # PER_LAYER: how many layers it is spread over, one share beside each


def ddp(s: Sizes, grad_bytes: float, bucket_bytes: float = 25 * 2**20) -> list[Collective]:
    """DistributedDataParallel (ftui: default 25 MiB buckets, gradient_as_bucket_view; no_sync
    on the micro batches before the last): one all-reduce of every gradient per optimizer step,
    bucket by bucket as backward fills them, on NCCL's stream. The input embedding's gradient
    is complete only when backward ends (tied: the LM head's is the same tensor), so its
    all-reduce waits for nothing and hides behind nothing."""
    rest = (s.params - s.embed) * grad_bytes
    return [
        Collective("gradients, bucketed", ALL_REDUCE, rest, max(1, math.ceil(rest / bucket_bytes)), IN_BACKWARD, "backward", STEP),
        Collective("input embedding's gradient", ALL_REDUCE, s.embed * grad_bytes, 1, EXPOSED, "after backward", STEP),
    ]


def fsdp(s: Sizes, param_bytes: float, reduce_bytes: float) -> list[Collective]:
    """FSDP2 as ftui wraps it: ``fully_shard`` per decoder layer with reshard_after_forward, the
    root (embeddings, LM head, final norm) without; a layer's parameters all-gathered for its
    forward and again for its backward (prefetched beside the layer before), its gradients
    reduce-scattered after its backward (beside the next), every micro batch (ftui never skips
    the sync: that would keep whole fp32 gradients). Exposed: the root's and the first layer's
    gathers before anything computes, the first layer's and the root's reductions after."""
    L, layer, root = s.layers, s.layer, s.root
    return [
        Collective("root parameters (embeddings, LM head)", ALL_GATHER, root * param_bytes, 1, EXPOSED, "forward", MICRO_BATCH),
        Collective("first layer's parameters", ALL_GATHER, layer * param_bytes, 1, EXPOSED, "forward", MICRO_BATCH),
        Collective("layers' parameters", ALL_GATHER, (L - 1) * layer * param_bytes, L - 1, PER_LAYER, "forward", MICRO_BATCH, L - 1),
        Collective("layers' parameters again", ALL_GATHER, L * layer * param_bytes, L, PER_LAYER, "backward", MICRO_BATCH, L),
        Collective("layers' gradients", REDUCE_SCATTER, (L - 1) * layer * reduce_bytes, L - 1, PER_LAYER, "backward", MICRO_BATCH,
                   L - 1),
        Collective("first layer's gradients", REDUCE_SCATTER, layer * reduce_bytes, 1, EXPOSED, "after backward", MICRO_BATCH),
        Collective("root gradients", REDUCE_SCATTER, root * reduce_bytes, 1, EXPOSED, "after backward", MICRO_BATCH),
    ]


def zero2(s: Sizes, bucket_elements: float = 5e8, dtype_bytes: float = 2) -> list[Collective]:
    """DeepSpeed ZeRO-2 with ftui's zero2 preset (bf16 module, ``overlap_comm: false``,
    ``reduce_bucket_size`` and ``allgather_bucket_size`` 5e8 elements) and
    ``managed_gradient_accumulation: false``: gradients reduced during every backward in
    buckets, each an all-reduce of the bucket (DeepSpeed 0.19's default
    ``use_multi_rank_bucket_allreduce``; each rank then keeps its partition) on the compute
    stream, which waits for it; after the optimizer step each rank's updated bf16 partition is
    all-gathered, before the next forward."""
    size = s.params * dtype_bytes
    buckets = max(1, math.ceil(s.params / bucket_elements))
    return [
        Collective("gradients (all-reduce of each bucket)", ALL_REDUCE, size, buckets, EXPOSED, "backward", MICRO_BATCH),
        Collective("updated parameters", ALL_GATHER, size, buckets, EXPOSED, "after the optimizer step", STEP),
    ]


def bucket_flushes(tensors: list[int], bucket_elements: float) -> int:
    """Reductions of ZeRO-3's gradient bucket: a tensor that would overflow the bucket sends what
    it holds first (DeepSpeed's reduce_independent_p_g_buckets_and_remove_grads), so a tensor
    larger than the bucket goes alone and small neighbours go together."""
    flushes, held = 0, 0
    for n in tensors:
        if held and held + n > bucket_elements:
            flushes, held = flushes + 1, 0
        held += n
    return flushes + (1 if held else 0)


def zero3_kept_layers(s: Sizes, max_reuse_distance: float = 1e9, max_live: float = 1e9) -> int:
    """Decoder layers whose gathered parameters ZeRO-3 keeps from their forward to their backward:
    those reused within ``stage3_max_reuse_distance`` parameters (the j-th layer from the top is
    reused after the j layers above it twice and the LM head), as long as ``stage3_max_live_parameters``
    allows (ftui's zero3 preset: 1e9 each)."""
    kept = 0
    for j in range(s.layers):
        if 2 * j * s.layer + s.embed > max_reuse_distance or (kept + 1) * s.layer + s.embed > max_live:
            break
        kept += 1
    return kept


def zero3(s: Sizes, dtype_bytes: float = 2, reduce_bucket_elements: float | None = None) -> list[Collective]:
    """DeepSpeed ZeRO-3 with ftui's zero3 preset (bf16 module, ``overlap_comm: false``,
    ``reduce_bucket_size`` and ``stage3_prefetch_bucket_size`` from the hidden size: h^2 and
    0.9 h^2 elements; norms below the 10 h persistence threshold stay whole): each module's
    parameters all-gathered for its forward (prefetched one module ahead on a stream of their
    own) and, unless kept by the reuse distance, again for its backward; the LM head's weight
    gathered as a module of its own (tied: the embedding's, gathered a second time); gradients
    reduce-scattered in buckets on the compute stream, which waits for them."""
    b = dtype_bytes
    L, layer = s.layers, s.layer
    kept = zero3_kept_layers(s)
    bucket = reduce_bucket_elements or s.hidden**2
    buckets = bucket_flushes(s.backward_order(), bucket) if s.layer_tensors else max(1, math.ceil(s.params / bucket))
    return [
        Collective("input embedding", ALL_GATHER, s.embed * b, 1, EXPOSED, "forward", MICRO_BATCH),
        Collective("first layer's parameters", ALL_GATHER, layer * b, LINEARS_PER_LAYER, EXPOSED, "forward", MICRO_BATCH),
        Collective("layers' parameters", ALL_GATHER, (L - 1) * layer * b, LINEARS_PER_LAYER * (L - 1), PER_LAYER, "forward", MICRO_BATCH, L - 1),
        Collective("LM head", ALL_GATHER, s.embed * b, 1, EXPOSED, "forward", MICRO_BATCH),
        Collective(f"layers' parameters again ({kept} of {L} kept)", ALL_GATHER, (L - kept) * layer * b, LINEARS_PER_LAYER * (L - kept), PER_LAYER,
                   "backward", MICRO_BATCH, L - kept),
        Collective("input embedding again", ALL_GATHER, s.embed * b, 1, EXPOSED, "after backward", MICRO_BATCH),
        Collective("gradients (bucketed reduce-scatter)", REDUCE_SCATTER, s.params * b, buckets, EXPOSED, "backward", MICRO_BATCH),
    ]


@dataclass(frozen=True)
class StepTime:
    """One optimizer step on the topology, against the same settings' single-GPU step."""

    compute_s: float  # accumulation x the single-GPU micro batch
    comm_s: float  # every collective's time, hidden or not
    exposed_s: float  # what the step waits for
    nvlink_bytes_per_gpu: float
    net_bytes_per_gpu: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_s

    @property
    def efficiency(self) -> float:
        """Tokens/s against n single GPUs: compute / (compute + exposed)."""
        return self.compute_s / self.step_s


def step_time(traffic: list[Collective], topo: Topology, micro_s: float, layer_share: float,
              accumulation: int = 1, backward_share: float = 2 / 3) -> StepTime:
    """The step: ``accumulation`` micro batches of ``micro_s`` seconds each (the measured
    single-GPU micro batch, forward + backward + its share of the optimizer step), plus what
    communication the computation cannot hide. ``layer_share``: one decoder layer's share of the
    micro batch's compute (its FLOPs' share); backward takes ``backward_share`` of it (2 of the 6N).

    - EXPOSED: all of it.
    - IN_BACKWARD: what exceeds one backward pass (DDP's buckets; once per step, in the last
      micro batch's backward).
    - PER_LAYER: per layer, what exceeds the layer's forward or backward compute; the
      collectives of one phase on one layer are added (they share the links).
    NCCL's kernels also take a few SMs from the computation they hide behind: not counted."""
    times = {c: topo.seconds(c.kind, c.size, c.count) for c in traffic}
    per = {c: (accumulation if c.every == MICRO_BATCH else 1) for c in traffic}
    exposed = sum(times[c] * per[c] for c in traffic if c.where == EXPOSED)
    backward_s = micro_s * backward_share
    exposed += sum(max(0.0, times[c] - backward_s) * per[c] for c in traffic if c.where == IN_BACKWARD)
    for phase, share in (("forward", 1 - backward_share), ("backward", backward_share)):
        rows = [c for c in traffic if c.where == PER_LAYER and c.phase == phase]
        if not rows:
            continue
        rows = [c for c in rows if c.layers > 0]
        if not rows:
            continue
        each = {c: topo.seconds(c.kind, c.size / c.layers, max(1, c.count // c.layers)) for c in rows}
        beside = micro_s * layer_share * share  # one layer's forward or backward
        for k in range(max(c.layers for c in rows)):  # a row spread over fewer layers covers the first of them
            exposed += max(0.0, sum(t for c, t in each.items() if c.layers > k) - beside) * accumulation
    nvlink = sum(topo.bytes_per_gpu(c.kind, c.size)[0] * per[c] for c in traffic)
    net = sum(topo.bytes_per_gpu(c.kind, c.size)[1] * per[c] for c in traffic)
    return StepTime(accumulation * micro_s, sum(times[c] * per[c] for c in traffic), exposed, nvlink, net)
