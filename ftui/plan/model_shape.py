"""A model's shape, the numbers of a decoder-only transformer that decide its memory, read from
its config.json (the demo's, a local directory's, or a hub model's already in the cache) without
torch: the planner (``ftui.plan.planner``), the config's checks and the export estimate read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.i18n import _
from ftui.plan.model_json import ModelJSONError, find_model_json
from ftui.plan.vision_shape import VisionShape, vision_shape
from ftui.presets.families import runs_sdpa


class UnknownModel(ValueError):
    """The model's config.json cannot be found or read."""


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
    vision: VisionShape = VisionShape()  # a vision-language model's vision tower and projector (ftui.plan.vision_shape)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ModelShape":
        from ftui.plan.model_sizes import size_problems

        problems = size_problems(cfg)  # infinity, 0, -1: refused by name before any arithmetic
        if problems:
            raise UnknownModel(problems[0])
        vision = vision_shape(cfg)
        cfg = cfg.get("text_config") or cfg  # multimodal configs nest the language model
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            return cls(
                vocab=int(cfg["vocab_size"]), hidden=hidden, intermediate=int(cfg.get("intermediate_size") or 4 * hidden),
                layers=int(cfg["num_hidden_layers"]), heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads), tied=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in ("qwen2", "qwen2_moe", "qwen2_vl_text", "qwen2_5_vl_text"))),
                sdpa=runs_sdpa(cfg), vision=vision,
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
    def language_params(self) -> int:
        return self.layers * self.layer_params + self.embed_params * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        """Every parameter: the language model's, and a vision-language model's tower and projector."""
        return self.language_params + self.vision.tower + self.vision.projector


def read_model_config(model_name_or_path: str) -> dict[str, Any]:
    """config.json of the demo, a local model directory, or a hub model already in the cache
    (ftui.plan.model_json); UnknownModel when there is none, or it is malformed (named)."""
    try:
        found = find_model_json(model_name_or_path, "config.json")
    except ModelJSONError as err:
        raise UnknownModel(str(err)) from None
    if found is None:
        raise UnknownModel(_("no config.json for {model} (not a local directory nor in the hub cache)").format(
            model=repr(model_name_or_path)))
    return found[1]
