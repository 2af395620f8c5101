""""Will it fit?": per-GPU memory of a run, estimated from the model's config.json alone.

No torch here (the launch form and ``ftui plan`` use it on a login node). The estimate
follows what ftui's runner really allocates, engine by engine:

- torch engines (single, ddp, fsdp): fp32 master weights, fp32 gradients and two fp32 AdamW
  moments for what trains (16 bytes per trainable parameter); bf16/fp16 run as autocast,
  which keeps a half-precision copy of the weights it used until backward. ``pure_bf16``
  trains bf16 weights with bf16 gradients and moments (8 bytes), without autocast. LoRA/QLoRA in
  half precision load the frozen base in that type (2 bytes, or about 0.52 for NF4).
  DDP uses gradients as bucket views (no second copy). FSDP shards weights, gradients and
  moments over the processes and gathers one layer (and the root) at a time.
- DeepSpeed (zero0-3): the module in bf16/fp16, half-precision gradients, and 12 bytes of
  fp32 master weight + moments per trainable parameter, sharded by stage (1: optimizer,
  2: + gradients, 3: + weights); the offload presets keep those on the host.
- Gradients and activations coexist only where gradients persist (DDP's buckets,
  DeepSpeed's buffers); where they are freed after each step (one process, FSDP), the peak
  holds the larger of the two (grads are born during backward as activations die).
- Activations per micro batch of ``micro_batch x cutoff_len`` tokens (padding to the longest
  example, or packed rows, fill at most that): what each decoder layer saves for backward
  with SDPA attention (no sequence-squared term), or only the layer inputs with gradient
  checkpointing; plus the logits and the cross-entropy's fp32 copies, which dominate for
  small models with large vocabularies.

The estimate is what ``torch.cuda.max_memory_allocated`` would report; the verdict adds
allocator slack (:data:`SLACK`) and what the processes hold outside the allocator (the CUDA
context and NCCL's buffers, :func:`runtime_overhead`: assumed, and said so in the output)
before comparing it with the GPU's memory. Checked against measured peaks in
``bench/planner_check.py``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json
from ftui.i18n import _
from ftui.rundir.paths import DEMO_MODEL, DEMO_MODEL_DIR
from ftui.plan.loss_chunks import LIGER_CHUNK_FACTOR, LOSS_CHUNK_ELEMENTS
from ftui.presets.families import runs_sdpa
from ftui.presets.engine_presets import NEEDS_SEVERAL, deepspeed_precision, engine_spec, more_memory_saving, read_user_deepspeed, spec_from

GIB = 2**30
SLACK = 1.05  # allocator fragmentation
# Memory outside the allocator's count, per GPU. These are assumptions, not measurements:
# - the CUDA context with cuBLAS/cuDNN workspaces and kernels: 0.75 GiB (a few hundred MB
#   to about 1 GB depending on the CUDA version and the libraries loaded);
# - NCCL's buffers, per communicator: NVIDIA/nccl#964 measured 544 MB (2 GPUs) and 688 MB
#   (3-4 GPUs) per communicator on 4x A100 with NVLink, and NCCL's maintainers say it grows
#   with the channel count, i.e. with link bandwidth (nccl#864, nccl#986); 0.75 GiB rounds
#   the larger figure up;
# - NVLS (NVLink SHARP: Hopper and newer behind an NVSwitch, used from 3 GPUs of one node)
#   maps another 2,415,919,104 B per communicator (NCCL's "nvlsTotalSize" on 8x H100/H200,
#   vllm-project/vllm#9699; NCCL_NVLS_ENABLE=0 turns it off). NVML cannot tell whether an
#   NVSwitch is there, so every Hopper+ node with 3 or more processes is assumed to use it.
CUDA_CONTEXT_BYTES = int(0.75 * GIB)
NCCL_COMMUNICATOR_BYTES = int(0.75 * GIB)
NCCL_NVLS_BYTES = 2_415_919_104
NVLS_MIN_LOCAL_PROCESSES = 3
NVLS_MIN_COMPUTE_MAJOR = 9  # Hopper
DEMO_CONFIG = DEMO_MODEL_DIR / "config.json"
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class UnknownModel(ValueError):
    """The model's config.json cannot be found or read."""


@dataclass(frozen=True)
class Overhead:
    """What each process holds on its GPU outside PyTorch's allocator (assumed, see above)."""

    context: int = CUDA_CONTEXT_BYTES
    communicators: int = 0  # NCCL communicators on this GPU
    per_communicator: int = 0
    nvls: bool = False

    @property
    def total(self) -> int:
        return self.context + self.communicators * self.per_communicator

    def describe(self) -> str:
        """E.g. "CUDA context 0.8 GiB + NCCL buffers 2 x 0.8 GiB (assumed)"."""
        text = _("CUDA context {size}").format(size=gib(self.context))
        if self.communicators:
            times = f"{self.communicators} x " if self.communicators > 1 else ""
            buffers = _("NCCL buffers incl. NVLS {size}") if self.nvls else _("NCCL buffers {size}")
            text += " + " + buffers.format(size=f"{times}{gib(self.per_communicator)}")
        return text + " " + _("(assumed)")

    def brief(self) -> str:
        """The same in few words, for the launch form: "CUDA context + NCCL 1.5 GiB, assumed"."""
        what = _("CUDA context + NCCL {size}, assumed") if self.communicators else _("CUDA context {size}, assumed")
        return what.format(size=gib(self.total))


def runtime_overhead(*, deepspeed: bool, world_size: int, nproc_per_node: int, compute_major: int | None) -> Overhead:
    """The CUDA context, plus NCCL's buffers when there are several processes: one
    communicator for the torch engines (the default group), two for DeepSpeed (it clones the
    world group for data parallelism: deepspeed/utils/groups.py, _clone_world_group); NVLS
    buffers on Hopper and newer with 3 or more processes on the node, unless the environment
    the run inherits turns NVLS off. ``compute_major`` None (no GPU known) plans for the
    older generations."""
    if world_size <= 1:
        return Overhead()
    nvls = ((compute_major or 0) >= NVLS_MIN_COMPUTE_MAJOR and nproc_per_node >= NVLS_MIN_LOCAL_PROCESSES
            and os.environ.get("NCCL_NVLS_ENABLE") != "0")
    return Overhead(communicators=2 if deepspeed else 1, nvls=nvls,
                    per_communicator=NCCL_COMMUNICATOR_BYTES + (NCCL_NVLS_BYTES if nvls else 0))


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that decide its memory."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool = False
    attention_bias: bool = False
    sdpa: bool = True  # whether SDPA computes its attention (else flash_attn auto loads it eager: Gemma 2)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ModelShape":
        from ftui.plan.model_sizes import size_problems

        problems = size_problems(cfg)  # infinity, 0, -1: refused by name before any arithmetic
        if problems:
            raise UnknownModel(problems[0])
        cfg = cfg.get("text_config") or cfg  # multimodal configs nest the language model
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            return cls(
                vocab=int(cfg["vocab_size"]), hidden=hidden, intermediate=int(cfg.get("intermediate_size") or 4 * hidden),
                layers=int(cfg["num_hidden_layers"]), heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads), tied=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in ("qwen2", "qwen2_moe"))),
                sdpa=runs_sdpa(cfg),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise UnknownModel(_("config.json lacks what the planner needs ({error}); it knows Llama-style decoder models").format(
                error=err)) from None

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def layer_params(self) -> int:
        shapes = self.linear_shapes()
        n = sum(a * b for a, b in shapes.values()) + 2 * self.hidden  # two norms
        if self.attention_bias:
            n += shapes["q_proj"][1] + 2 * shapes["k_proj"][1]
        return n

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embed_params * (1 if self.tied else 2) + self.hidden


def read_model_config(model_name_or_path: str) -> dict[str, Any]:
    """config.json of the demo, a local model directory, or a hub model already in the cache."""
    if model_name_or_path == DEMO_MODEL:
        candidates = [DEMO_CONFIG]
    else:
        from ftui.plan.model_files import cached_snapshots

        try:
            candidates = [Path(model_name_or_path).expanduser() / "config.json"]
        except RuntimeError:  # ~nosuchuser/...
            candidates = []
        candidates += [snapshot / "config.json" for snapshot in cached_snapshots(model_name_or_path)]
    for path in candidates:
        try:
            data = load_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    raise UnknownModel(_("no config.json for {model} (not a local directory nor in the hub cache)").format(model=repr(model_name_or_path)))


@dataclass
class Estimate:
    """Bytes per GPU (per process), split the way people reason about it."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    params: int
    trainable: int
    host_bytes: float = 0.0  # what the offload presets keep in host memory, per process
    notes: list[str] = field(default_factory=list)
    # True where gradients are freed after each optimizer step (single process, FSDP): they
    # are born during backward as the activations die, so the peak holds the larger of the
    # two, not both. DDP's buckets and DeepSpeed's flat buffers keep gradients all the time.
    gradients_overlap_activations: bool = False
    overhead: Overhead = field(default_factory=Overhead)  # CUDA context + NCCL buffers

    @property
    def total(self) -> float:
        """The peak: what max_memory_allocated reports at the end of the forward or during backward."""
        if self.gradients_overlap_activations:
            return self.weights + self.optimizer + max(self.gradients, self.activations)
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def needed(self) -> float:
        """What the GPU must have: the estimate plus allocator slack, the CUDA context and NCCL's buffers."""
        return self.total * SLACK + self.overhead.total

    def split(self) -> str:
        return _("weights {weights} · gradients {gradients} · optimizer {optimizer} · activations {activations}").format(
            weights=gib(self.weights), gradients=gib(self.gradients), optimizer=gib(self.optimizer), activations=gib(self.activations))


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= 0.1 * GIB else f"{n / 2**20:.0f} MiB"


def count(n: float) -> str:
    """A parameter count as people write it: 6.74 B, 20.0 M, 800 K."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return str(int(n))


def trainable_params(shape: ModelShape, method: str, lora_rank: int, lora_target: str, freeze_layers: int) -> int:
    if method == "full":
        return shape.params
    if method == "freeze":
        return min(freeze_layers, shape.layers) * shape.layer_params
    shapes = shape.linear_shapes()
    names = LINEARS if lora_target.strip() in ("all", "") else [t.strip() for t in lora_target.split(",")]
    per_layer = sum(lora_rank * (shapes[n][0] + shapes[n][1]) for n in names if n in shapes)
    return shape.layers * per_layer


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def estimate(shape: ModelShape, *, method: str = "full", precision: str = "bf16", engine: str = "single", world_size: int = 1,
             micro_batch: int = 1, seq_len: int = 2048, gradient_checkpointing: bool = False, lora_rank: int = 8,
             lora_target: str = "all", freeze_layers: int = 2, zero_stage: int | None = None, offload: bool | None = None,
             nproc_per_node: int | None = None, compute_major: int | None = None, chunked_loss: bool = True,
             liger: bool = False, fused_kernels: bool = False, training_stage: str = "sft", pref_loss: str = "sigmoid",
             pure_bf16: bool = False, attention: str = "sdpa", packing: bool = True) -> Estimate:
    """Per-process memory of one configuration. ``zero_stage``/``offload`` override what the
    engine name implies (a user's own DeepSpeed file); ``nproc_per_node`` (default: all
    processes on one node) and ``compute_major`` (the GPUs' compute capability, None: unknown)
    decide NCCL's share of :attr:`Estimate.overhead`. ``liger`` (``enable_liger_kernel``):
    Liger's fused linear cross-entropy computes the chunked loss (chunks sized from the
    hidden size), and its RMSNorm and SwiGLU replace transformers' in the layers.
    ``fused_kernels``: ``torch_compile`` or Liger's kernels fuse the MLP's activation, which
    then saves its two inputs only (compiled) or its inputs and its output (Liger's kernel),
    not the activation and the product as well.
    ``training_stage``: dpo and rm put a pair's two answers through the model (twice the rows), and dpo
    and kto take the answers' log-probabilities in chunks as the loss is taken (ftui's own
    chunks, also with ``liger``; full logits when ``chunked_loss`` is off) and, for full and
    freeze, keep a frozen reference copy of the model (not for the reference-free orpo /
    simpo); rm computes no logits (its value head gives one number a position). ``pure_bf16``
    (torch engines): the weights, their gradients and AdamW's moments are bf16 (8 bytes per
    trained parameter), no autocast copy, the residual stream bf16 (transformers' RMSNorm
    keeps an fp32 copy of its input, as under LoRA in half precision); LoRA's adapters stay
    fp32. ``attention`` (from ``flash_attn``, :func:`attention_for`): ``sdpa``, ``fa2`` (torch's
    varlen FlashAttention-2: no repeated K/V heads and no mask bias where ``packing`` or several
    rows of examples make SDPA take a mask) or ``eager`` (the softmax of every layer kept, heads x sequence
    length per token).
    Checked against every peak an H100 measured: tests/test_plan_h100_peaks.py."""
    P = shape.params
    T = trainable_params(shape, method, lora_rank, lora_target, freeze_layers)
    W = max(1, world_size)
    spec = engine_spec(engine)
    deepspeed = zero_stage is not None or spec.deepspeed
    pure_bf16 = pure_bf16 and not deepspeed  # refused there; DeepSpeed's own bf16 is counted below
    half = precision in ("bf16", "fp16") or pure_bf16
    stage = zero_stage if zero_stage is not None else spec.zero_stage
    offload = offload if offload is not None else spec.host_optimizer
    notes: list[str] = []
    layer = shape.layer_params
    host = 0.0

    # --- weights, gradients, optimizer
    if deepspeed:
        pbytes = 2 if half else 4
        frozen_bytes = (P - T) * (0.52 if method == "qlora" else pbytes)
        weights = (T * pbytes + frozen_bytes) / (W if stage == 3 else 1)
        if stage == 3:
            weights += 2 * layer * pbytes  # the gathered layer and the prefetched next one
        grads = T * pbytes / (W if stage >= 2 else 1)
        if half and stage <= 1:
            grads += T * 4 / (W if stage == 1 else 1)  # fp32 gradient accumulation buffer
        if stage >= 2:
            grads += shape.hidden**2 * pbytes  # reduce bucket
        opt = (8 * T if stage == 0 and not half else 12 * T) / (W if stage >= 1 else 1)
        if offload:
            host += opt
            opt = 0.0
            if stage == 3:
                host += weights - 2 * layer * pbytes
                weights = 2 * layer * pbytes
        res_bytes = pbytes
    else:
        base_bytes = 4.0
        if (method in ("lora", "qlora") and half) or pure_bf16:
            base_bytes = 2.0
        frozen = (P - T) * (0.52 if method == "qlora" else base_bytes)
        if method == "qlora":  # embeddings and the LM head stay in half precision
            frozen = (P - T - shape.embed_params * (1 if shape.tied else 2)) * 0.52 + shape.embed_params * (1 if shape.tied else 2) * 2
        # what trains: fp32 weights, gradients and two moments; pure_bf16's full / freeze: all bf16
        tbytes = 2.0 if pure_bf16 and method in ("full", "freeze") else 4.0
        weights, grads, opt = T * tbytes + frozen, T * tbytes, T * 2 * tbytes
        cast = 2 * (T if method in ("full", "freeze") else 0) if half and not pure_bf16 else 0.0  # autocast's cached half weights
        if spec.fsdp:
            pbytes = 2 if half else 4
            working = (2 * layer + shape.embed_params * (1 if shape.tied else 2)) * pbytes
            sharded = weights / W
            weights, grads, opt = working, grads / W + layer * pbytes, opt / W
            if offload:
                host += sharded + grads - layer * pbytes + opt
                grads, opt = layer * pbytes, 0.0
            else:
                weights += sharded
            cast = 0.0  # the gathered copies are already in the compute type
        weights += cast
        res_bytes = 4 if base_bytes == 4 else 2

    # --- a preference stage's frozen reference model (LoRA's is the base with the adapter off)
    reference_free = training_stage == "dpo" and pref_loss in ("orpo", "simpo")
    if training_stage in ("dpo", "kto") and method in ("full", "freeze") and not reference_free:
        if deepspeed:  # ZeRO-0/1/2: a copy in the policy's precision; ZeRO-3: partitioned like it
            reference = P * (2 if half else 4) / (W if stage == 3 else 1)
        else:  # single, DDP: the fp32 copy whole; FSDP: its shard (layers gathered in turn, as the policy's)
            reference = P * (2.0 if pure_bf16 else 4.0) / (W if spec.fsdp else 1)
        weights += reference
        notes.append(_("{stage}: a frozen reference copy of the model, {size} on each GPU").format(stage=training_stage, size=gib(reference)))

    # --- activations of one micro batch
    rows = 2 if training_stage in ("dpo", "rm") else 1  # a pair's answers; kto's mismatched rows run without gradients
    tokens = micro_batch * seq_len * rows
    act = 2 if half else 4
    kv = shape.kv_heads * shape.head_dim
    per_layer = 6 * shape.hidden * res_bytes + (4 * shape.hidden + 3 * kv + 4 * shape.intermediate) * act
    if res_bytes == 2 and not deepspeed and not liger:
        # layers in half precision (pure_bf16, LoRA / QLoRA over a half-precision base):
        # transformers' RMSNorm computes in fp32 and keeps that fp32 copy of its input for
        # backward, two norms a layer (Liger's norm keeps the half-precision input and one
        # fp32 number a row). Fitted to an H100 at the Qwen2.5-1.5B shape rather than derived
        # (whether the copy replaces part of the 6 hidden-sized tensors above is not broken
        # down): without it the plan was 0.91x the pure-bf16 peak and 0.90x LoRA's, 0.99x
        # and 0.99x with it. Also counted with torch_compile, which may recompute the copy
        # instead (unmeasured: the safe side). DeepSpeed's half-precision module has the same
        # copy, but its estimate already runs over the one peak measured (ZeRO-0, 1.12x on
        # an H100): not added there until a measurement says where that surplus is.
        per_layer += 2 * shape.hidden * 4
    if fused_kernels:
        # measured on an H100 (bench/gpu_set.py, Qwen2.5-1.5B shape, 8,192 tokens): compile
        # 9.8 GB and Liger 7.4 GB below the plain model's peak, 42 and 32 KB per token and
        # layer. Compiled, the SwiGLU saves its two inputs only (the activation and the
        # product recomputed in backward: 2 x intermediate values fewer); Liger's SwiGLU is
        # an autograd function whose saved tensors compile cannot change (its two inputs),
        # and the down projection still keeps its output (1 x intermediate fewer). The rest
        # of Liger's and compile's saving is not counted: the planner stays on the safe side.
        # Before this distinction the plan was 0.84x the peak of pure bf16 with compile and Liger.
        per_layer -= (1 if liger else 2) * shape.intermediate * act
    if attention == "fa2" and training_stage != "pt" and (packing or micro_batch * rows > 1):
        # With a mask (packed rows, or padding in a batch of several rows), SDPA in every
        # layer gets K and V repeated to every query head (transformers' repeat_kv: grouped
        # heads only) and turns transformers' boolean mask into a float bias in the compute
        # type, both kept for backward: 2 x (q - kv) + seq_len values a token. torch's varlen
        # kernel takes grouped heads as they are (ftui passes them so where the kernel accepts
        # them, ftui/runner/attention.py) and the sequences' lengths instead of a mask. On an
        # H100 (Qwen2.5-1.5B shape, pure bf16, compile + Liger, 8 x 2,048 tokens) fa2's peak was
        # 3.94 GiB below SDPA's; this term, 4.08 GiB. Without a mask SDPA repeats nothing and
        # makes no bias, and fa2 saves nothing: one row (a dpo or rm pair is two), or pt's
        # blocks of running text (one sequence a row, as LLaMA-Factory's).
        per_layer -= ((2 * (shape.heads * shape.head_dim - kv) if shape.kv_heads < shape.heads else 0) + seq_len) * act
    elif attention == "eager":
        # transformers' eager attention: the fp32 softmax of every query against every key
        # of its row is kept for backward (and, in half precision, its cast to the compute
        # type, which the product with V keeps): heads x sequence length values per token.
        # seq_len is cutoff_len (packed rows; a padded batch's rows are at most that long).
        per_layer += shape.heads * seq_len * (4 + (act if half else 0))
    if method == "freeze":
        saved_layers = min(freeze_layers, shape.layers)  # nothing before the first trainable layer keeps anything
    else:
        saved_layers = shape.layers
    if gradient_checkpointing:
        layers_act = tokens * (saved_layers * shape.hidden * res_bytes + 2 * per_layer)
    else:
        layers_act = tokens * per_layer * (saved_layers + 1)  # +1: the gradients flowing back through a layer
    if training_stage == "rm":
        logits = tokens * shape.hidden * act  # the value head's input; one value a position
    elif chunked_loss:
        # one chunk's logits at a time, plus the flattened copy of the last hidden states the
        # chunks are cut from. A chunk's logits are computed in the compute type, copied to
        # fp32, turned into the softmax gradient in place and cast back to the compute type:
        # 4 bytes a logit in fp32, 6 in half precision. The preference stages' log-probabilities
        # do the same twice (forward, and the chunk recomputed in backward), one chunk at a time.
        chunk = min(tokens, max(64, LOSS_CHUNK_ELEMENTS // max(1, shape.vocab)))
        per_logit = 4 + (act if half else 0)
        if liger and training_stage not in ("dpo", "kto"):  # Liger bounds a chunk's logits by LIGER_CHUNK_FACTOR x the hidden states' size
            chunk = min(tokens, _next_pow2(-(-tokens // -(-shape.vocab // (LIGER_CHUNK_FACTOR * shape.hidden)))))
            per_logit = act  # its kernel turns the logits into their gradient in place
        logits = chunk * shape.vocab * per_logit + tokens * shape.hidden * act
    else:
        # the logits in the compute type, their fp32 copy, log-softmax and its gradient (an fp32
        # run has no copy to make: 11.6 bytes a logit measured on the CPU, bench/planner_check.py)
        logits = tokens * shape.vocab * (12 + (act if half else 0))
    activations = layers_act + logits

    if world_size == 1 and engine in NEEDS_SEVERAL:
        notes.append(_("{engine} shards over processes: with one process it saves nothing").format(engine=engine))
    overlap = not deepspeed and (spec.fsdp or W == 1)
    overhead = runtime_overhead(deepspeed=deepspeed, world_size=W, nproc_per_node=nproc_per_node or W, compute_major=compute_major)
    return Estimate(weights=weights, gradients=grads, optimizer=opt, activations=activations, params=P, trainable=T,
                    host_bytes=host, notes=notes, gradients_overlap_activations=overlap, overhead=overhead)


def estimate_for(cfg: Any, shape: ModelShape | None = None, compute_major: int | None = None, **overrides: Any) -> Estimate:
    """The estimate for a RunConfig (fields overridable, for the what-ifs) on GPUs of compute
    capability ``compute_major`` (None: unknown)."""
    get = lambda k: overrides.get(k, getattr(cfg, k))  # noqa: E731
    shape = shape or ModelShape.from_config(read_model_config(cfg.model_name_or_path))
    method = overrides.get("method", cfg.method)
    engine = get("engine")
    stage = offload = None
    precision = overrides.get("precision", cfg.precision)
    if cfg.deepspeed and "engine" not in overrides:
        ds = read_user_deepspeed(cfg.deepspeed)
        spec = spec_from(cfg.engine_name, ds)
        stage, offload = spec.zero_stage, spec.host_optimizer
        precision = deepspeed_precision(ds) or precision
    return estimate(shape, method=method, precision=precision, engine=engine,
                    world_size=overrides.get("world_size", cfg.world_size), micro_batch=get("per_device_train_batch_size"),
                    seq_len=get("cutoff_len"), gradient_checkpointing=get("gradient_checkpointing"), lora_rank=get("lora_rank"),
                    lora_target=get("lora_target"), freeze_layers=get("freeze_trainable_layers"), zero_stage=stage, offload=offload,
                    nproc_per_node=cfg.nproc_per_node, compute_major=compute_major,
                    chunked_loss=get("chunked_loss"), liger=get("enable_liger_kernel"),
                    fused_kernels=bool(get("torch_compile") or get("enable_liger_kernel")),
                    training_stage=getattr(cfg, "stage", "sft"), pref_loss=getattr(cfg, "pref_loss", "sigmoid"),
                    pure_bf16=bool(getattr(cfg, "pure_bf16", False)),
                    attention=attention_for(get("flash_attn"), shape),
                    packing=bool(cfg.packing))  # None (the stage's default): no examples kept apart by a mask


def attention_for(flash_attn: str, shape: ModelShape) -> str:
    """The attention the runner computes with for ``flash_attn`` (LLaMA-Factory's values): auto
    is SDPA, or eager for a model SDPA cannot compute (transformers' own choice, ftui.runner.attention)."""
    if flash_attn == "auto":
        return "sdpa" if shape.sdpa else "eager"
    return {"fa2": "fa2", "disabled": "eager"}.get(flash_attn, "sdpa")


@dataclass
class Verdict:
    estimate: Estimate
    gpu_bytes: int | None  # the smallest GPU's memory; None: no GPU known
    suggestions: list[str]

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_bytes is None else self.estimate.needed <= self.gpu_bytes

    def short(self, unit: str = "GPU") -> tuple[str, str]:
        """Two short lines for the launch form: the split, and the verdict with the best fix."""
        e = self.estimate
        split = _("~{total}/{unit}: weights {weights} · grads {gradients} · optimizer {optimizer} · activations {activations}").format(
            total=gib(e.total), unit=unit, weights=gib(e.weights), gradients=gib(e.gradients), optimizer=gib(e.optimizer),
            activations=gib(e.activations))
        if e.host_bytes:
            split += " · " + _("host {size}").format(size=gib(e.host_bytes))
        if self.fits is None:
            return split, ""
        needs = _("needs ~{size} incl. {overhead}").format(size=gib(e.needed), overhead=e.overhead.brief())
        gpus = gib(self.gpu_bytes or 0)
        if self.fits:
            return split, _("fits {size} GPUs ({needs})").format(size=gpus, needs=needs)
        fix = (_("; try {change} (ftui plan lists more)").format(change=self.suggestions[0]) if self.suggestions
               else _("; more or larger GPUs needed"))
        return split, _("does NOT fit {size} GPUs ({needs})").format(size=gpus, needs=needs) + fix

    def summary(self) -> str:
        e = self.estimate
        head = _("about {size} per GPU ({split})").format(size=gib(e.total), split=e.split())
        if e.host_bytes:
            head += _("; {size} per process in host memory (offload)").format(size=gib(e.host_bytes))
        if self.fits is None:
            return head + _("; no GPU seen: nothing to compare with")
        needs = _("needs ~{size} with {overhead}").format(size=gib(e.needed), overhead=e.overhead.describe())
        gpus = gib(self.gpu_bytes or 0)
        if self.fits:
            return head + _("; fits {size} GPUs ({needs})").format(size=gpus, needs=needs)
        tail = (_("; try {changes}").format(changes=_("; or ").join(self.suggestions)) if self.suggestions
                else _("; nothing ftui offers makes it fit: use more or larger GPUs"))
        return head + _("; does NOT fit {size} GPUs ({needs})").format(size=gpus, needs=needs) + tail


def what_fits(cfg: Any, shape: ModelShape, gpu_bytes: int, limit: int = 3, compute_major: int | None = None) -> list[str]:
    """Changes that make the run fit, least disruptive first: every combination of a more
    memory-saving engine, a smaller micro batch (same effective batch), gradient
    checkpointing, LoRA/QLoRA and, where attention is eager (``flash_attn: disabled``), SDPA
    is estimated (a few hundred estimates, microseconds each)
    and ranked by how much it changes the run."""
    engines: list[tuple[str | None, int]] = [(None, 0)]
    engine, seen = (None if cfg.deepspeed else cfg.engine), set()
    pure = bool(getattr(cfg, "pure_bf16", False))
    while more_memory_saving(engine, pure) not in (None, *seen):
        engine = more_memory_saving(engine, pure)
        seen.add(engine)
        if not (engine in NEEDS_SEVERAL and cfg.world_size == 1):
            engines.append((engine, len(engines)))
    batches = [(cfg.per_device_train_batch_size, 0)]
    while batches[-1][0] > 1:
        batches.append((batches[-1][0] // 2, len(batches)))
    ckpts = [(cfg.gradient_checkpointing, 0)] + ([(True, 1)] if not cfg.gradient_checkpointing else [])
    methods = [(cfg.method, 0)]
    if cfg.method == "full":
        methods.append(("lora", 3))
    if cfg.method in ("full", "lora") and cfg.precision != "fp32":
        methods.append(("qlora", 4))
    # eager attention (flash_attn: disabled) keeps every layer's softmax; SDPA computes the same
    # (where it can compute this model's attention at all)
    attentions = [(cfg.flash_attn, 0)] + ([("auto", 1)] if cfg.flash_attn == "disabled" and shape.sdpa else [])
    found: list[tuple[int, bool, float, str]] = []
    for (eng, c1), (mb, c2), (ck, c3), (method, c4), (attn, c5) in itertools.product(engines, batches, ckpts, methods, attentions):
        cost = c1 + c2 + c3 + c4 + c5
        if cost == 0:
            continue
        over: dict[str, Any] = {"per_device_train_batch_size": mb, "gradient_checkpointing": ck, "method": method,
                                "flash_attn": attn}
        if eng:
            over["engine"] = eng
        e = estimate_for(cfg, shape, compute_major, **over)
        if e.needed > gpu_bytes:
            continue
        parts = []
        if attn != cfg.flash_attn:
            parts.append("flash_attn: auto")  # key names and values: not translated
        if eng:
            parts.append(f"engine {eng}")
        if mb != cfg.per_device_train_batch_size:
            accum = cfg.gradient_accumulation_steps * cfg.per_device_train_batch_size // mb
            parts.append(_("per_device_train_batch_size {micro_batch} with gradient_accumulation_steps {accumulation}").format(
                micro_batch=mb, accumulation=accum))
        if ck and not cfg.gradient_checkpointing:
            parts.append("gradient_checkpointing: true")
        if method != cfg.method:
            parts.append("finetuning_type lora" if method == "lora" else "QLoRA (finetuning_type lora, quantization_bit 4)")
        # at equal cost, SDPA for eager attention first: the same result, no slower
        found.append((cost, attn == cfg.flash_attn, e.total, " + ".join(parts) + f" (~{gib(e.total)})"))
    found.sort()
    return [text for _cost, _same_attention, _total, text in found[:limit]]


def plan(cfg: Any, gpu_bytes: int | None = None, compute_major: int | None = None) -> Verdict:
    """The estimate for ``cfg`` and, against ``gpu_bytes`` (default: the smallest of the GPUs
    its processes use: its ``gpus``, else the first CUDA_VISIBLE_DEVICES leaves), whether it fits and what would. ``compute_major`` (default: the
    oldest of those GPUs, from NVML) sizes NCCL's buffers. Raises UnknownModel when
    config.json is missing."""
    shape = ModelShape.from_config(read_model_config(cfg.model_name_or_path))
    if getattr(cfg, "device", "auto") != "cpu":  # a CPU run is not compared with GPUs
        from ftui.machine.gpu import compute_capabilities, sample_gpus

        picked = getattr(cfg, "gpus", None)  # the run's own GPUs, else those CUDA_VISIBLE_DEVICES leaves
        if gpu_bytes is None:
            totals = [g.mem_total for g in sample_gpus(picked)[:cfg.nproc_per_node]]
            gpu_bytes = min(totals) if totals else None
        if compute_major is None:
            majors = [major for _gpu, (major, _minor) in compute_capabilities(cfg.nproc_per_node, picked)]
            compute_major = min(majors) if majors else None
    e = estimate_for(cfg, shape, compute_major)
    suggestions = what_fits(cfg, shape, gpu_bytes, compute_major=compute_major) if gpu_bytes is not None and e.needed > gpu_bytes else []
    return Verdict(e, gpu_bytes, suggestions)
