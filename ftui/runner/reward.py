"""A reward model: a value head on a causal language model, scoring an answer by the value
at its last token (TRL's AutoModelForCausalLMWithValueHead, which LLaMA-Factory's ``stage: rm``
trains and saves as ``value_head.safetensors`` with keys ``v_head.summary.weight`` / ``.bias``).

The head is installed on the model's output projection module (a child named ``v_head``, and
that module's forward replaced), for the same reason the chunked loss hooks there: the
engines' wrappers (DDP, FSDP2, DeepSpeed) and peft see the forward they expect, the head's
parameters are trained, sharded and checkpointed with the model's, and no vocabulary-sized
logits are computed. The model's ``logits`` output then holds the values, one per position.
"""

from __future__ import annotations

import types
from pathlib import Path
import torch
from torch import nn

from ftui.i18n import _
from ftui.runner.loss import output_projection

VALUE_HEAD_FILE = "value_head.safetensors"
HEAD_PREFIX = "v_head."


class ValueHead(nn.Module):
    """TRL's value head: dropout (0.1, its default) then a linear layer to one number."""

    def __init__(self, hidden: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.summary = nn.Linear(hidden, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.summary(self.dropout(hidden.to(self.summary.weight.dtype)))


def _values_forward(self: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return self.v_head(hidden)


def install_value_head(model: nn.Module, head: ValueHead | None = None, dtype: torch.dtype = torch.float32) -> ValueHead:
    """Puts a value head (a new one, or ``head``) on the model's output projection, in
    ``dtype`` (fp32; bf16 when a pure_bf16 run trains bf16 weights: FSDP2 shards a group's
    trained parameters in one dtype). The projection's own weight is frozen unless it is the
    input embedding too (tied): its output is no longer used, so it would get no gradient
    (and DDP would wait for one)."""
    proj = output_projection(model)
    if proj is None:
        raise ValueError(_("this model has no output projection (get_output_embeddings) to put a value head on"))
    hidden = proj.weight.shape[1]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embed = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    if embed is None or embed.weight is not proj.weight:
        proj.weight.requires_grad_(False)
        if getattr(proj, "bias", None) is not None:
            proj.bias.requires_grad_(False)
    head = head if head is not None else ValueHead(hidden)
    proj.v_head = head.to(device=proj.weight.device, dtype=dtype)
    proj.forward = types.MethodType(_values_forward, proj)
    return head


def last_token_values(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's score: the value at its last real token (rows are right-padded), in fp32."""
    values = values.squeeze(-1).float()
    return values.gather(-1, attention_mask.sum(-1, keepdim=True) - 1).squeeze(-1)


def pair_scores(values: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) scores of a batch of pairs (chosen rows first)."""
    scores = last_token_values(values, attention_mask)
    pairs = scores.size(0) // 2
    return scores[:pairs], scores[pairs:]


def split_value_head(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the model's weights, the value head's under TRL's names ``v_head.summary.*``)."""
    model, head = {}, {}
    for key, value in state_dict.items():
        at = key.find(HEAD_PREFIX)
        if at == 0 or (at > 0 and key[at - 1] == "."):
            head[key[at:]] = value
        else:
            model[key] = value
    return model, head


def load_value_head(path: Path) -> ValueHead:
    """The value head saved beside a reward model (``final/value_head.safetensors``)."""
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    weight = tensors[HEAD_PREFIX + "summary.weight"]
    head = ValueHead(weight.shape[1])
    head.load_state_dict({k[len(HEAD_PREFIX):]: v for k, v in tensors.items()})
    return head.eval()


@torch.no_grad()
def score(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's score: the value at its last real token (right padding)."""
    return last_token_values(model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits, attention_mask)


# --- A policy's value head (ppo): the logits AND a value per position from one forward

def install_policy_value_head(model: nn.Module, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Puts a fresh value head (TRL's init) on the model's output projection, beside its own
    work: a forward hook hands the projection's input, the last hidden states, to the head, and
    keeps the values (``taken_values``) while the projection computes the logits (or the
    chunked log-probabilities) as before. The head's parameters train, shard and checkpoint
    with the model's (a child ``v_head`` of the projection: key names ``...v_head.summary.*``).
    Returns the projection."""
    proj = output_projection(model)
    if proj is None:
        raise ValueError(_("this model has no output projection (get_output_embeddings) to put a value head on"))
    proj.v_head = ValueHead(proj.weight.shape[1]).to(device=proj.weight.device, dtype=dtype)
    proj._ftui_values = None
    proj.register_forward_hook(_keep_values)
    return proj


def _keep_values(module: nn.Module, args: tuple, _output: torch.Tensor) -> None:
    module._ftui_values = module.v_head(args[0]).squeeze(-1)


def taken_values(proj: nn.Module) -> torch.Tensor:
    """The values of the projection's last forward (rows, T), fp32, let go of after."""
    values, proj._ftui_values = proj._ftui_values, None
    if values is None:
        raise RuntimeError("no forward went through the output projection since the values were last taken")
    return values.float()
