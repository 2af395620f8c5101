"""Regenerates ppo.json: what TRL 0.9.6's PPO maths compute on fixed tensors. TRL 0.9.6 is what
LLaMA-Factory 0.9.5's CustomPPOTrainer.step runs (LF requires trl<=0.9.6 for PPO), so these are the
values ftui/runner/ppo_math.py must reproduce (tests/test_ppo_math.py). README.md describes the JSON.

Run it with TRL 0.9.6's wheel unpacked over LLaMA-Factory's venv (never ftui's venv):

    pip download trl==0.9.6 --no-deps -d /tmp/trl096 && unzip -q -o /tmp/trl096/*.whl -d /tmp/trl096/x
    PYTHONPATH=/tmp/trl096/x /work/lfvenv/bin/python tests/data/trl096_ppo/make_reference.py

TRL's own methods are called: ``PPOTrainer.compute_rewards``, ``compute_advantages`` and ``loss`` on a
namespace holding the config and KL controller they read (the trainer is not built),
``trl.core.masked_whiten``, ``trl.trainer.utils.AdaptiveKLController`` and ``RunningMoments``. Two
small pieces of ``PPOTrainer.step`` are transcribed because they are inline there: the score
normalisation (ppo_trainer.py 676-684, use_score_scaling = use_score_norm = LF's ppo_score_norm)
and the KL statistic the controller reads (``objective/kl``, 1291-1293).
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import torch
import trl
from trl.core import masked_whiten
from trl.trainer.ppo_trainer import PPOTrainer
from trl.trainer.utils import AdaptiveKLController, RunningMoments

HERE = Path(__file__).resolve().parent
B, T, V = 4, 6, 7
DT = torch.float64


def trainer(whiten_rewards: bool, kl_coef: float = 0.2) -> types.SimpleNamespace:
    cfg = types.SimpleNamespace(kl_penalty="kl", gamma=1.0, lam=0.95, whiten_rewards=whiten_rewards, cliprange=0.2,
                                cliprange_value=0.2, vf_coef=0.1, ratio_threshold=10.0)
    s = types.SimpleNamespace(config=cfg, kl_ctl=AdaptiveKLController(kl_coef, 6.0, 10000))
    s._kl_penalty = types.MethodType(PPOTrainer._kl_penalty, s)
    return s


def losses_case(base: dict, values: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
                new_logps: torch.Tensor, vpreds: torch.Tensor) -> dict:
    new_logps = new_logps.clone().requires_grad_(True)
    vpreds = vpreds.clone().requires_grad_(True)
    logits = torch.zeros(B, T, V, dtype=DT)  # only the (unused here) entropy statistic reads them
    pg, vf, stats = PPOTrainer.loss(trainer(False), base["logps"], values, logits, vpreds, new_logps, base["mask"],
                                    advantages, returns)
    (pg + vf).backward()
    return dict(new_logps=new_logps.tolist(), vpreds=vpreds.tolist(), pg_loss=pg.item(), vf_loss=vf.item(),
                grad_new_logps=new_logps.grad.tolist(), grad_vpreds=vpreds.grad.tolist(),
                clipfrac=stats["policy/clipfrac"].item(), vf_clipfrac=stats["val/clipfrac"].item(),
                approxkl=stats["policy/approxkl"].item(), policykl=stats["policy/policykl"].item(),
                ratio=stats["policy/ratio"][base["mask"].bool()].mean().item())


def main() -> None:
    assert trl.__version__ == "0.9.6", trl.__version__
    torch.manual_seed(96)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=DT)
    base = dict(mask=mask, logps=torch.randn(B, T, dtype=DT) * 0.3 - 2, ref_logps=torch.randn(B, T, dtype=DT) * 0.3 - 2,
                values=torch.randn(B, T, dtype=DT), scores=torch.tensor([1.0, -0.5, 0.3, 2.0], dtype=DT))
    out = dict(trl=trl.__version__, torch=torch.__version__, gamma=1.0, lam=0.95, cliprange=0.2, cliprange_value=0.2,
               vf_coef=0.1, ratio_threshold=10.0, **{k: v.tolist() for k, v in base.items()})

    out["rewards"] = []
    for kl_coef in (0.2, 0.05):
        r, nsr, kls = PPOTrainer.compute_rewards(trainer(False, kl_coef), base["scores"], base["logps"],
                                                 base["ref_logps"], mask)
        out["rewards"].append(dict(kl_coef=kl_coef, rewards=r.tolist(), non_score_rewards=nsr.tolist(),
                                   kls=kls.tolist(), sequence_kl=(kls * mask).sum(-1).mean().item()))
    rewards = torch.tensor(out["rewards"][0]["rewards"], dtype=DT)

    out["whiten"] = dict(values=(torch.randn(B, T, dtype=DT) * 2 + 1).tolist())
    x = torch.tensor(out["whiten"]["values"], dtype=DT)
    out["whiten"]["shifted"] = masked_whiten(x, mask).tolist()
    out["whiten"]["unshifted"] = masked_whiten(x, mask, shift_mean=False).tolist()

    out["gae"], out["losses"] = [], []
    noise_lp, noise_v = torch.randn(B, T, dtype=DT), torch.randn(B, T, dtype=DT)
    for whiten_rewards in (False, True):
        values, advantages, returns = PPOTrainer.compute_advantages(trainer(whiten_rewards), base["values"], rewards,
                                                                    mask)
        out["gae"].append(dict(whiten_rewards=whiten_rewards, values=values.tolist(), advantages=advantages.tolist(),
                               returns=returns.tolist()))
        if not whiten_rewards:
            for name, lp_scale, shift in (("near", 0.25, 0.0), ("skipped", 0.05, 3.0)):
                case = losses_case(base, values, advantages, returns, base["logps"] + noise_lp * lp_scale + shift,
                                   values + noise_v * 0.3)
                out["losses"].append(dict(name=name, **case))

    ctl = AdaptiveKLController(0.2, 6.0, 10000)
    out["kl_controller"] = dict(init=0.2, target=6.0, horizon=10000, n_steps=8, updates=[])
    for current in (3.0, 6.5, 12.0, -1.0, 6.0, 7.1):
        ctl.update(current, 8)
        out["kl_controller"]["updates"].append(dict(current=current, value=float(ctl.value)))

    running = RunningMoments(types.SimpleNamespace(use_distributed=False))
    out["score_norm"] = []
    for batch in ([1.0, -0.5, 0.3, 2.0], [0.7, 0.1, -1.2, 3.3], [5.0, 4.5, 6.0, 5.5]):
        scores = torch.tensor(batch)  # float32, as LF's scores reach step()
        batch_mean, batch_std = running.update(scores)
        eps = torch.finfo(scores.dtype).eps
        normed = (scores - running.mean.to(scores)) / (running.std.to(scores) + eps)  # step(), 676-684
        out["score_norm"].append(dict(scores=batch, batch_mean=batch_mean, batch_std=batch_std,
                                      running_mean=running.mean.item(), running_std=running.std.item(),
                                      running_var=running.var.item(), normalised=normed.tolist()))
    (HERE / "ppo.json").write_text(json.dumps(out, indent=1) + "\n")
    for c in out["losses"]:
        print(c["name"], c["pg_loss"], c["vf_loss"], c["clipfrac"], c["ratio"])


if __name__ == "__main__":
    main()
