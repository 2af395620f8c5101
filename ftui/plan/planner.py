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
before comparing it with the GPU's memory (``ftui.plan.verdict``: ``plan``, the verdict and what
would fit). The model's numbers come from ``ftui.plan.model_shape``. Checked against measured
peaks in ``bench/planner_check.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ftui.i18n import _
from ftui.plan.generation import buffer_bytes, generation_bytes, kv_cache_bytes, rollout_of
from ftui.plan.loss_chunks import LIGER_CHUNK_FACTOR, LOSS_CHUNK_ELEMENTS
from ftui.plan.model_shape import ModelShape, read_model_config
from ftui.plan.vision_activations import ImageLoad, image_load, media_notes, vision_activations
from ftui.presets.engine_presets import NEEDS_SEVERAL, deepspeed_precision, engine_spec, read_user_deepspeed, spec_from
from ftui.stages import describe as describe_stage

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
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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
    # a generating stage's rollout (ftui.plan.generation): its KV cache and the like, held while
    # no activations are; gradients freed after each step are gone then too
    generation: float = 0.0

    @property
    def total(self) -> float:
        """The peak: what max_memory_allocated reports at the end of the forward or during backward,
        or while a generating stage samples its rollout, whichever is larger."""
        if self.gradients_overlap_activations:
            training, rollout = max(self.gradients, self.activations), self.generation
        else:
            training, rollout = self.gradients + self.activations, self.gradients + self.generation
        return self.weights + self.optimizer + max(training, rollout)

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


def trainable_params(shape: ModelShape, method: str, lora_rank: int, lora_target: str, freeze_layers: int,
                     frozen: tuple[bool, bool, bool] = (True, True, False)) -> int:
    """What trains. ``frozen``: a vision-language model's freeze_vision_tower,
    freeze_multi_modal_projector and freeze_language_model (LLaMA-Factory's rule,
    ftui.runner.vlm): full trains the parts not frozen; freeze the last layers (and the vision
    blocks of the same indexes where the tower is not frozen) and an unfrozen projector; LoRA's
    adapters are counted on the language model's layers (those on an unfrozen tower's blocks
    are left out: a few per cent of the adapters)."""
    vision, projector, language = frozen
    v = shape.vision
    if method == "full":
        return (0 if language else shape.language_params) + (0 if vision else v.tower) + (0 if projector else v.projector)
    if method == "freeze":
        indexes = range(max(0, shape.layers - freeze_layers), shape.layers)
        return ((0 if language else min(freeze_layers, shape.layers) * shape.layer_params)
                + (0 if vision else sum(1 for i in indexes if i < v.depth) * v.block) + (0 if projector else v.projector))
    if language and v.tower:
        return 0
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
             pure_bf16: bool = False, attention: str = "sdpa", packing: bool = True,
             stage_options: dict[str, Any] | None = None, frozen: tuple[bool, bool, bool] = (True, True, False),
             images: ImageLoad | None = None, gradient_accumulation_steps: int = 1) -> Estimate:
    """Per-process memory of one configuration. ``zero_stage``/``offload`` override what the
    engine name implies (a user's own DeepSpeed file); ``nproc_per_node`` (default: all
    processes on one node) and ``compute_major`` (the GPUs' compute capability, None: unknown)
    decide NCCL's share of :attr:`Estimate.overhead`. ``liger`` (``enable_liger_kernel``):
    Liger's fused linear cross-entropy computes the chunked loss (chunks sized from the
    hidden size), and its RMSNorm and SwiGLU replace transformers' in the layers.
    ``fused_kernels``: ``torch_compile`` or Liger's kernels fuse the MLP's activation, which
    then saves its two inputs only (compiled) or its inputs and its output (Liger's kernel),
    not the activation and the product as well.
    ``training_stage``: the stage's description (ftui.stages) gives its terms: the rows an
    example keeps activations for (dpo and rm put a pair's two answers through the model,
    twice the rows), its output (dpo and kto take the answers' log-probabilities in chunks as
    the loss is taken, ftui's own chunks, also with ``liger``; full logits when
    ``chunked_loss`` is off; rm computes no logits, its value head gives one number a
    position), and whether, with ``pref_loss`` and ``stage_options`` (its other options'
    values), it keeps a frozen reference model: a copy for full and freeze (not for the
    reference-free orpo / simpo). ``pure_bf16``
    (torch engines): the weights, their gradients and AdamW's moments are bf16 (8 bytes per
    trained parameter), no autocast copy, the residual stream bf16 (transformers' RMSNorm
    keeps an fp32 copy of its input, as under LoRA in half precision); LoRA's adapters stay
    fp32. ``attention`` (from ``flash_attn``, :func:`attention_for`): ``sdpa``, ``fa2`` (torch's
    varlen FlashAttention-2: no repeated K/V heads and no mask bias where ``packing`` or several
    rows of examples make SDPA take a mask) or ``eager`` (the softmax of every layer kept, heads x sequence
    length per token). ``frozen``: a vision-language model's frozen parts (``trainable_params``);
    its vision tower and projector count in the weights (``ModelShape.params``); ``images``: the
    example its micro batches are planned with, its images, videos or audios
    (``ftui.plan.vision_activations``: the tower's activations and its input; the media tokens
    are in the rows of ``seq_len``). A generating stage (``PlannerTerms.generation``: grpo, ppo)
    samples its rollout between steps (``ftui.plan.generation``: the KV cache of its completions,
    ``gradient_accumulation_steps`` deciding how many are generated at once where the stage's
    steps_per_generation is unset) and trains on rows of ``seq_len`` (the prompt) plus the completion.
    Checked against every peak an H100 measured: tests/test_plan_h100_peaks.py."""
    P = shape.params
    described = describe_stage(training_stage)
    terms = described.planner
    T = trainable_params(shape, method, lora_rank, lora_target, freeze_layers, frozen)
    if terms.generation and described.value_head:  # ppo's value head beside the policy's logits
        T += shape.hidden + 1
    vision_frozen, projector_frozen = frozen[0], frozen[1]
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
    if method in ("full", "freeze") and described.needs_reference({"pref_loss": pref_loss, **(stage_options or {})}):
        if deepspeed:  # ZeRO-0/1/2: a copy in the policy's precision; ZeRO-3: partitioned like it
            reference = P * (2 if half else 4) / (W if stage == 3 else 1)
        else:  # single, DDP: the fp32 copy whole; FSDP: its shard (layers gathered in turn, as the policy's)
            reference = P * (2.0 if pure_bf16 else 4.0) / (W if spec.fsdp else 1)
        weights += reference
        notes.append(_("{stage}: a frozen reference copy of the model, {size} on each GPU").format(stage=training_stage, size=gib(reference)))

    # --- ppo's reward model (an rm run's, taken as the policy's size: LLaMA-Factory's share the base), whole on
    # each GPU in the run's half precision (fp32 without one), frozen
    if terms.generation and described.value_head:
        scorer = P * (2.0 if precision in ("bf16", "fp16") or pure_bf16 else 4.0)
        weights += scorer
        notes.append(_("{stage}: the reward model, {size} on each GPU").format(stage=training_stage, size=gib(scorer)))

    # --- a generating stage's rollout: sampled before the step's forwards, then trained on
    rollout = None
    if terms.generation:
        rollout = rollout_of(stage_options or {}, micro_batch=micro_batch, seq_len=seq_len,
                             gradient_accumulation_steps=gradient_accumulation_steps, world_size=W)
        seq_len = rollout.row_len  # a training row: the prompt and its completion

    # --- activations of one micro batch
    rows = terms.rows_with_gradients  # a pair's answers; kto's mismatched rows run without gradients
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
    if attention == "fa2" and not terms.running_text and (packing or micro_batch * rows > 1):
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
    if terms.output == "value":
        logits = tokens * shape.hidden * act  # the value head's input; one value a position
    elif chunked_loss:
        # one chunk's logits at a time, plus the flattened copy of the last hidden states the
        # chunks are cut from. A chunk's logits are computed in the compute type, copied to
        # fp32, turned into the softmax gradient in place and cast back to the compute type:
        # 4 bytes a logit in fp32, 6 in half precision. The preference stages' log-probabilities
        # do the same twice (forward, and the chunk recomputed in backward), one chunk at a time.
        chunk = min(tokens, max(64, LOSS_CHUNK_ELEMENTS // max(1, shape.vocab)))
        per_logit = 4 + (act if half else 0)
        if liger and terms.output == "logits":  # Liger bounds a chunk's logits by LIGER_CHUNK_FACTOR x the hidden states' size
            chunk = min(tokens, _next_pow2(-(-tokens // -(-shape.vocab // (LIGER_CHUNK_FACTOR * shape.hidden)))))
            per_logit = act  # its kernel turns the logits into their gradient in place
        logits = chunk * shape.vocab * per_logit + tokens * shape.hidden * act
    else:
        # the logits in the compute type, their fp32 copy, log-softmax and its gradient (an fp32
        # run has no copy to make: 11.6 bytes a logit measured on the CPU, bench/planner_check.py)
        logits = tokens * shape.vocab * (12 + (act if half else 0))
    activations = layers_act + logits
    if images is not None and shape.vision.depth:
        vision = shape.vision
        trained_blocks = range(max(0, shape.layers - freeze_layers), shape.layers) if method == "freeze" else range(vision.depth)
        activations += vision_activations(vision, images, micro_batch * rows, act=act, res_bytes=res_bytes,
                                          tower_trains=not vision_frozen and any(i < vision.depth for i in trained_blocks),
                                          projector_trains=not projector_frozen, gradient_checkpointing=gradient_checkpointing,
                                          eager=attention == "eager")
        notes += media_notes(images, seq_len)

    generation = 0.0
    if rollout is not None:
        gathered = P * (2 if half else 4) * (1 - 1 / W) if deepspeed and stage == 3 else 0.0
        buffer = buffer_bytes(rollout)
        activations += buffer
        generation = generation_bytes(shape, rollout, act=act, gathered_weights=gathered) + buffer
        notes.append(_("{stage}: the rollout's KV cache, {size} for {n} completions of up to {length} tokens "
                       "(cutoff_len + max_completion_length), held while it generates").format(
            stage=training_stage, size=gib(kv_cache_bytes(shape, rollout, act)), n=rollout.completions,
            length=rollout.row_len))

    if world_size == 1 and engine in NEEDS_SEVERAL:
        notes.append(_("{engine} shards over processes: with one process it saves nothing").format(engine=engine))
    overlap = not deepspeed and (spec.fsdp or W == 1)
    overhead = runtime_overhead(deepspeed=deepspeed, world_size=W, nproc_per_node=nproc_per_node or W, compute_major=compute_major)
    return Estimate(weights=weights, gradients=grads, optimizer=opt, activations=activations, params=P, trainable=T,
                    host_bytes=host, notes=notes, gradients_overlap_activations=overlap, overhead=overhead,
                    generation=generation)


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
                    stage_options=describe_stage(getattr(cfg, "stage", "sft")).option_values(cfg),
                    pure_bf16=bool(getattr(cfg, "pure_bf16", False)),
                    attention=attention_for(get("flash_attn"), shape),
                    packing=bool(cfg.packing),  # None (the stage's default): no examples kept apart by a mask
                    frozen=(bool(getattr(cfg, "freeze_vision_tower", True)), bool(getattr(cfg, "freeze_multi_modal_projector", True)),
                            bool(getattr(cfg, "freeze_language_model", False))),
                    gradient_accumulation_steps=get("gradient_accumulation_steps"),
                    images=overrides["images"] if "images" in overrides else  # a tower reads images or videos (kernel), or audios (mels)
                    (image_load(cfg, shape.vision) if shape.vision.depth and (shape.vision.kernel or shape.vision.mels) else None))


def attention_for(flash_attn: str, shape: ModelShape) -> str:
    """The attention the runner computes with for ``flash_attn`` (LLaMA-Factory's values): auto
    is SDPA, or eager for a model SDPA cannot compute (transformers' own choice, ftui.runner.attention)."""
    if flash_attn == "auto":
        return "sdpa" if shape.sdpa else "eager"
    return {"fa2": "fa2", "disabled": "eager"}.get(flash_attn, "sdpa")
