"""Regenerates encoding.json and losses.json: what LLaMA-Factory 0.9.5 itself makes of
preference data (stages rm/dpo and kto) and what its DPO, KTO and reward-model trainers compute
on fixed logits. Runs only where LLaMA-Factory is installed (a venv of its own, never ftui's;
see ../llamafactory_pt/README.md for the install); ftui's tests read the stored JSON and need
no LLaMA-Factory. README.md here describes the JSON layout.

    /path/to/lfvenv/bin/python tests/data/llamafactory_preference/make_reference.py [LF_DATA_DIR]

First it writes data/: the first records of LLaMA-Factory's dpo_en_demo, dpo_zh_demo and
kto_en_demo, and the registry (dataset_info.json) for them and for the two alpaca files written
by hand (kept): alpaca_ranking_demo.json and alpaca_kto_demo.json (each with one invalid record
that LLaMA-Factory drops).
encoding.json: LLaMA-Factory's get_dataset with stage "rm" (the pairwise processor; stage dpo
uses the same) and "kto" (the feedback processor), one dataset per call, the default
preprocessing_batch_size (1000: the whole dataset is one batch, which matters for KTO's KL
completions), on tests/data/families_tokenizer with each family's BOS / EOS / PAD.
losses.json: LLaMA-Factory's own trainer methods (CustomDPOTrainer.get_batch_loss_metrics,
CustomKTOTrainer.get_batch_loss_metrics, PairwiseTrainer.compute_loss, rm's ComputeAccuracy)
on small random fp32 logits, the trainers made without __init__ and given the attributes their
methods read.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
LF_DATA = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "llamafactory"
DATA = HERE / "data"
FAMILIES = ROOT / "tests" / "data" / "llamafactory_templates" / "families.json"
TEMPLATES_SCRIPT = FAMILIES.parent / "make_reference.py"
FIRST = {"dpo_en_demo": 12, "dpo_zh_demo": 8, "kto_en_demo": 16}
HAND_WRITTEN = {
    "alpaca_ranking_demo": {
        "file_name": "alpaca_ranking_demo.json", "ranking": True,
        "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected",
                    "system": "system", "history": "history"},
    },
    "alpaca_kto_demo": {
        "file_name": "alpaca_kto_demo.json",
        "columns": {"prompt": "instruction", "query": "input", "response": "output", "kto_tag": "label"},
    },
}
STAGE_DATASETS = {"rm": ["dpo_en_demo", "dpo_zh_demo", "alpaca_ranking_demo"], "kto": ["kto_en_demo", "alpaca_kto_demo"]}
TEMPLATES = ["qwen", "llama3", "qwen3_nothink", "default"]
CUTOFFS = (4096, 48)
PRISTINE: dict = {}  # LLaMA-Factory's templates as registered, before any case changed them
IGNORE = -100


# ---------------------------------------------------------------- encoding.json


def write_data() -> None:
    DATA.mkdir(exist_ok=True)
    info = json.loads((LF_DATA / "dataset_info.json").read_text())
    registry = {}
    for name, n in FIRST.items():
        entry = info[name]
        records = json.loads((LF_DATA / entry["file_name"]).read_text())[:n]
        (DATA / entry["file_name"]).write_text(json.dumps(records, ensure_ascii=False, indent=0) + "\n")
        registry[name] = entry
    registry.update(HAND_WRITTEN)  # their files are written by hand (kept in place)
    (DATA / "dataset_info.json").write_text(json.dumps(registry, indent=2) + "\n")


@functools.cache
def templates_reference():
    """tests/data/llamafactory_templates/make_reference.py as a module (it runs nothing on import)."""
    spec = importlib.util.spec_from_file_location("templates_reference", TEMPLATES_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tokenizer_dir(family: dict, tmp: Path) -> Path:
    """The families tokenizer with this family's special tokens: the templates reference's own
    helper, so both references set the tokenizer up the same way."""
    return templates_reference().tokenizer_dir(family, tmp)


def record_count(dataset: str) -> int:
    entry = json.loads((DATA / "dataset_info.json").read_text())[dataset]
    return len(json.loads((DATA / entry["file_name"]).read_text()))


def encode_case(stage: str, dataset: str, template: str, cutoff: int, tok_dir: Path, tmp: Path) -> dict:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.data.mm_plugin import get_mm_plugin
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    import llamafactory.data.template as lf_template

    # get_template_and_fix_tokenizer changes the registered template in place: each case
    # starts from a copy of it as registered.
    PRISTINE.setdefault(template, copy.deepcopy(lf_template.TEMPLATES[template]))
    lf_template.TEMPLATES[template] = copy.deepcopy(PRISTINE[template])
    args = dict(
        model_name_or_path=str(tok_dir), stage=stage, do_train=True, finetuning_type="full",
        dataset=dataset, dataset_dir=str(DATA), cutoff_len=cutoff, template=template,
        output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"),
    )
    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    assert data_args.preprocessing_batch_size == 1000  # the default: KL rotation spans the dataset
    module = load_tokenizer(model_args)
    tokenizer = module["tokenizer"]
    template_obj = get_template_and_fix_tokenizer(tokenizer, data_args)
    template_obj.mm_plugin = get_mm_plugin(name="base")
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage=stage, **module)["train_dataset"]
    if stage == "rm":
        keys = ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels")
        examples = [{k: list(r[k]) for k in keys} for r in ds]
    else:
        keys = ("input_ids", "labels", "kl_input_ids", "kl_labels")
        examples = [{**{k: list(r[k]) for k in keys}, "kto_tag": bool(r["kto_tags"])} for r in ds]
    return {
        "stage": stage, "dataset": dataset, "template": template, "cutoff_len": cutoff,
        "vocab": len(tokenizer), "eos": tokenizer.eos_token,
        "records": record_count(dataset), "dropped": record_count(dataset) - len(examples),
        "examples": examples,
    }


def write_encoding(tmp: Path) -> None:
    import llamafactory

    families = json.loads(FAMILIES.read_text())
    cases = []
    for stage, datasets in STAGE_DATASETS.items():
        for dataset in datasets:
            for template in TEMPLATES:
                for cutoff in CUTOFFS:
                    case = encode_case(stage, dataset, template, cutoff, tokenizer_dir(families[template], tmp), tmp)
                    print(stage, dataset, template, cutoff, len(case["examples"]), "dropped", case["dropped"], file=sys.stderr)
                    cases.append(case)
    out = {"lf_version": llamafactory.__version__, "tokenizer": "tests/data/families_tokenizer",
           "preprocessing_batch_size": 1000, "cases": cases}
    # Full token lists come to ~4.4 MB of JSON (the families tokenizer is nearly byte-level):
    # stored xz-compressed (~70 kB), read with json.loads(lzma.decompress(...)).
    text = json.dumps(out, separators=(",", ":")) + "\n"
    (HERE / "encoding.json.xz").write_bytes(lzma.compress(text.encode(), preset=9))


# ---------------------------------------------------------------- losses.json


B_PAIRS, T, V = 3, 7, 13
# Per pair: prompt length (IGNORE in labels), chosen and rejected response lengths; the rest of
# the T positions is right padding (IGNORE, input id 0, attention 0).
PAIR_SHAPES = [(2, 4, 5), (3, 3, 2), (1, 6, 4)]
DPO_CASES = [
    ("sigmoid", dict(pref_loss="sigmoid")),
    ("hinge", dict(pref_loss="hinge")),
    ("ipo", dict(pref_loss="ipo")),
    ("orpo", dict(pref_loss="orpo")),
    ("simpo", dict(pref_loss="simpo")),
    ("sigmoid_label_smoothing", dict(pref_loss="sigmoid", dpo_label_smoothing=0.1)),
    ("sigmoid_ftx", dict(pref_loss="sigmoid", pref_ftx=0.5)),
    ("simpo_gamma_beta", dict(pref_loss="simpo", simpo_gamma=0.5, pref_beta=2.0)),
]
DPO_DEFAULTS = dict(pref_loss="sigmoid", pref_beta=0.1, pref_ftx=0.0, dpo_label_smoothing=0.0, simpo_gamma=0.5)
# KTO: (prompt length, response length) per example and its tag; the KL completion of example i
# is example i-1's response (rotated by one, as LLaMA-Factory's feedback processor does).
KTO_SHAPES = [(2, 4), (3, 3), (1, 5), (2, 5), (2, 2)]
KTO_TAGS = [True, False, True, True, False]
KTO_CASES = [
    ("kto_w1_ftx0", dict(kto_chosen_weight=1.0, kto_rejected_weight=1.0, pref_ftx=0.0), "mixed"),
    ("kto_w1_ftx05", dict(kto_chosen_weight=1.0, kto_rejected_weight=1.0, pref_ftx=0.5), "mixed"),
    ("kto_w15_07_ftx0", dict(kto_chosen_weight=1.5, kto_rejected_weight=0.7, pref_ftx=0.0), "mixed"),
    ("kto_w15_07_ftx05", dict(kto_chosen_weight=1.5, kto_rejected_weight=0.7, pref_ftx=0.5), "mixed"),
    ("kto_kl_swapped", dict(kto_chosen_weight=1.0, kto_rejected_weight=1.0, pref_ftx=0.0), "swap_kl"),
    ("kto_all_desirable", dict(kto_chosen_weight=1.0, kto_rejected_weight=1.0, pref_ftx=0.5), "all_true"),
]
KTO_DEFAULTS = dict(pref_beta=0.1)
# RM: per pair (chosen length, rejected length) of real tokens; right padding after them.
# (name, seed, lengths, index of a pair whose chosen and rejected scores are made equal)
RM_CASES = [("rm_b3", 2, [(5, 7), (3, 4), (7, 2)], None), ("rm_b1", 2, [(4, 6)], None),
            ("rm_tie", 5, [(5, 5), (6, 3), (2, 7), (4, 4)], 1)]


def fix_trl_availability_flags() -> None:
    """trl 0.24 keeps `_<pkg>_available` flags from transformers' _is_package_available, which in
    transformers 5.x returns a (bool, version) tuple: always truthy, so importing trl's
    DPOTrainer tries to import mergekit (absent). Each flag becomes its bool. This changes no
    loss code, only which optional packages trl believes are installed."""
    from trl import import_utils

    for name, value in list(vars(import_utils).items()):
        if name.startswith("_") and name.endswith("_available") and isinstance(value, tuple):
            setattr(import_utils, name, value[0])


def tolist(x):
    """A tensor (or None) as nested Python floats / ints / bools for JSON."""
    return None if x is None else x.detach().cpu().tolist()


def fake_lm(table: list):
    """A module standing in for a causal LM: returns the stored logits for the input ids it is
    given (KTO's target and KL batches differ in their ids, so each gets its own logits)."""
    import torch

    class FakeLM(torch.nn.Module):
        def forward(self, input_ids=None, **_kwargs):
            for ids, logits in table:
                if torch.equal(ids, input_ids):
                    return SimpleNamespace(logits=logits)
            raise KeyError("no logits stored for these input ids")

    return FakeLM()


def accelerator_stub():
    import torch

    return SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x, unwrap_model=lambda m: m)


def sequences(gen, shapes: list[tuple[int, int]], prompts: list | None = None, responses: list | None = None):
    """Right-padded input_ids, attention_mask and labels (prompt IGNOREd) for (prompt, response)
    lengths, and the prompts and responses drawn; prompts / responses, where given, are used
    instead of random tokens (a pair's rejected row shares its chosen row's prompt; a KL row is
    its example's prompt with another example's response)."""
    import torch

    ids = torch.zeros(len(shapes), T, dtype=torch.long)
    mask = torch.zeros(len(shapes), T, dtype=torch.long)
    labels = torch.full((len(shapes), T), IGNORE, dtype=torch.long)
    drawn_prompts, drawn_responses = [], []
    for row, (p, r) in enumerate(shapes):
        prompt = torch.tensor(prompts[row]) if prompts else torch.randint(1, V, (p,), generator=gen)
        resp = torch.tensor(responses[row]) if responses else torch.randint(1, V, (r,), generator=gen)
        n = len(prompt) + len(resp)
        ids[row, :n] = torch.cat([prompt, resp])
        mask[row, :n] = 1
        labels[row, len(prompt):n] = resp
        drawn_prompts.append(prompt.tolist())
        drawn_responses.append(resp.tolist())
    return ids, mask, labels, drawn_prompts, drawn_responses


def dpo_case(name: str, overrides: dict) -> dict:
    import torch
    from llamafactory.train.dpo.trainer import CustomDPOTrainer

    settings = {**DPO_DEFAULTS, **overrides}
    gen = torch.Generator().manual_seed(1234)
    chosen_ids, chosen_mask, chosen_labels, prompts, _ = sequences(gen, [(p, c) for p, c, _ in PAIR_SHAPES])
    rejected_ids, rejected_mask, rejected_labels, _, _ = sequences(gen, [(p, r) for p, _, r in PAIR_SHAPES], prompts)
    ids, mask = torch.cat([chosen_ids, rejected_ids]), torch.cat([chosen_mask, rejected_mask])
    labels = torch.cat([chosen_labels, rejected_labels])
    torch.manual_seed(0)
    policy_logits = (2 * torch.randn(2 * B_PAIRS, T, V)).requires_grad_(True)
    use_ref_model = settings["pref_loss"] not in ("orpo", "simpo")  # LF: FinetuningArguments.use_ref_model
    reference_logits = 2 * torch.randn(2 * B_PAIRS, T, V) if use_ref_model else None

    trainer = CustomDPOTrainer.__new__(CustomDPOTrainer)
    trainer.finetuning_args = SimpleNamespace(use_ref_model=use_ref_model)
    trainer.beta = settings["pref_beta"]
    trainer.loss_type = settings["pref_loss"]
    trainer.ftx_gamma = settings["pref_ftx"]
    trainer.label_smoothing = settings["dpo_label_smoothing"]
    trainer.simpo_gamma = settings["simpo_gamma"]
    trainer.bco_gemma = 0.0
    trainer.ld_alpha = None
    trainer.f_divergence_type = "reverse_kl"  # as CustomDPOTrainer.__init__ sets them
    trainer.reference_free = False
    trainer.accelerator = accelerator_stub()
    trainer.ref_model = fake_lm([(ids, reference_logits)]) if use_ref_model else None

    seen: dict = {}
    forward, preference = trainer.concatenated_forward, trainer.compute_preference_loss

    def spy_forward(model, batch, is_ref_model=False):
        out = forward(model, batch, is_ref_model=is_ref_model)
        seen.setdefault("ref" if is_ref_model else "policy", out)
        return out

    def spy_preference(*args):
        seen["preference"] = preference(*args)  # its losses tensor then gets pref_ftx added in place
        return seen["preference"]

    trainer.concatenated_forward, trainer.compute_preference_loss = spy_forward, spy_preference
    batch = {"input_ids": ids.clone(), "attention_mask": mask.clone(), "labels": labels.clone()}
    loss, metrics = trainer.get_batch_loss_metrics(fake_lm([(ids, policy_logits)]), batch)
    loss.backward()
    per_pair, chosen_rewards, rejected_rewards = seen["preference"]
    assert torch.allclose(per_pair.mean(), loss)
    return {
        "name": name, "settings": settings, "use_ref_model": use_ref_model,
        "policy_logits": tolist(policy_logits), "reference_logits": tolist(reference_logits),
        "input_ids": tolist(ids), "attention_mask": tolist(mask), "labels": tolist(labels),
        "loss": loss.item(), "per_pair_loss": tolist(per_pair),
        "chosen_rewards": tolist(chosen_rewards), "rejected_rewards": tolist(rejected_rewards),
        "policy_chosen_logps": tolist(seen["policy"]["chosen_logps"]),
        "policy_rejected_logps": tolist(seen["policy"]["rejected_logps"]),
        "reference_chosen_logps": tolist(seen["ref"]["chosen_logps"]) if "ref" in seen else None,
        "reference_rejected_logps": tolist(seen["ref"]["rejected_logps"]) if "ref" in seen else None,
        "metrics": metrics, "grad_policy_logits": tolist(policy_logits.grad),
        # What trl's dpo_loss computes when told the loss type; LLaMA-Factory 0.9.5 does not tell it
        # (see README: with trl 0.24 hinge and ipo get the sigmoid loss).
        "trl_loss_as_named": trl_loss_as_named(trainer, seen),
    }


def trl_loss_as_named(trainer, seen: dict) -> list[float] | None:
    if "ref" not in seen:
        return None
    losses, _, _ = trainer.dpo_loss(seen["policy"]["chosen_logps"].detach(), seen["policy"]["rejected_logps"].detach(),
                                    seen["ref"]["chosen_logps"], seen["ref"]["rejected_logps"], loss_type=trainer.loss_type)
    return tolist(losses)


def kto_case(name: str, overrides: dict, variant: str) -> dict:
    import torch
    from llamafactory.train.kto.trainer import CustomKTOTrainer

    settings = {**KTO_DEFAULTS, **overrides}
    tags = [True] * len(KTO_TAGS) if variant == "all_true" else KTO_TAGS
    gen = torch.Generator().manual_seed(4321)
    ids, mask, labels, prompts, responses = sequences(gen, KTO_SHAPES)
    rotated = [responses[-1]] + responses[:-1]
    kl_ids, kl_mask, kl_labels, _, _ = sequences(gen, KTO_SHAPES, prompts, rotated)
    assert not torch.equal(ids, kl_ids)  # fake_lm tells the two batches apart by their ids
    torch.manual_seed(1)
    b = len(KTO_SHAPES)
    policy_logits = (2 * torch.randn(b, T, V)).requires_grad_(True)
    policy_kl_logits, reference_logits, reference_kl_logits = (2 * torch.randn(b, T, V) for _ in range(3))
    if variant == "swap_kl":  # the KL estimate's sign flips: LF clamps it at 0
        policy_kl_logits, reference_kl_logits = reference_kl_logits, policy_kl_logits

    trainer = CustomKTOTrainer.__new__(CustomKTOTrainer)
    trainer.finetuning_args = SimpleNamespace(use_ref_model=True)
    trainer.beta = settings["pref_beta"]
    trainer.desirable_weight = settings["kto_chosen_weight"]
    trainer.undesirable_weight = settings["kto_rejected_weight"]
    trainer.ftx_gamma = settings["pref_ftx"]
    trainer.calculate_KL = True
    trainer.loss_type = "kto"
    trainer.accelerator = accelerator_stub()
    trainer.ref_model = fake_lm([(ids, reference_logits), (kl_ids, reference_kl_logits)])

    seen: dict = {}
    kto_loss = trainer.kto_loss

    def spy_kto_loss(*args):
        seen["args"], seen["out"] = args, kto_loss(*args)
        return seen["out"]

    trainer.kto_loss = spy_kto_loss
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels, "kl_input_ids": kl_ids,
             "kl_attention_mask": kl_mask, "kl_labels": kl_labels, "kto_tags": torch.tensor(tags)}
    loss, metrics = trainer.get_batch_loss_metrics(fake_lm([(ids, policy_logits), (kl_ids, policy_kl_logits)]), batch)
    loss.backward()
    losses, chosen_rewards, rejected_rewards, kl = seen["out"]
    policy_chosen, policy_rejected, policy_kl, ref_chosen, ref_rejected, ref_kl = seen["args"]
    return {
        "name": name, "settings": settings,
        "policy_logits": tolist(policy_logits), "policy_kl_logits": tolist(policy_kl_logits),
        "reference_logits": tolist(reference_logits), "reference_kl_logits": tolist(reference_kl_logits),
        "input_ids": tolist(ids), "attention_mask": tolist(mask), "labels": tolist(labels),
        "kl_input_ids": tolist(kl_ids), "kl_attention_mask": tolist(kl_mask), "kl_labels": tolist(kl_labels),
        "kto_tags": tags, "loss": loss.item(), "losses": tolist(losses),
        "chosen_rewards": tolist(chosen_rewards), "rejected_rewards": tolist(rejected_rewards), "kl": kl.item(),
        "kl_unclamped": (policy_kl - ref_kl).mean().item(),
        "policy_chosen_logps": tolist(policy_chosen), "policy_rejected_logps": tolist(policy_rejected),
        "policy_kl_logps": tolist(policy_kl), "reference_chosen_logps": tolist(ref_chosen),
        "reference_rejected_logps": tolist(ref_rejected), "reference_kl_logps": tolist(ref_kl),
        "metrics": metrics, "grad_policy_logits": tolist(policy_logits.grad),
    }


def rm_case(name: str, seed: int, lengths: list[tuple[int, int]], tie: int | None) -> dict:
    import numpy as np
    import torch
    from transformers import EvalPrediction
    from llamafactory.train.rm.metric import ComputeAccuracy
    from llamafactory.train.rm.trainer import PairwiseTrainer

    b = len(lengths)
    torch.manual_seed(seed)
    values = torch.randn(2 * b, T)
    mask = torch.zeros(2 * b, T, dtype=torch.long)
    for i, (c, r) in enumerate(lengths):
        mask[i, :c], mask[b + i, :r] = 1, 1
    if tie is not None:  # this pair's chosen and rejected scores are equal: not counted accurate
        c, r = lengths[tie]
        values[b + tie, r - 1] = values[tie, c - 1]
    ids = torch.randint(1, V, (2 * b, T)) * mask

    class ValueHeadStub(torch.nn.Module):
        def forward(self, **_kwargs):
            return None, None, values

    trainer = PairwiseTrainer.__new__(PairwiseTrainer)
    loss, (_, chosen_scores, rejected_scores) = trainer.compute_loss(
        ValueHeadStub(), {"input_ids": ids, "attention_mask": mask}, return_outputs=True)
    metric = ComputeAccuracy()
    accuracy = metric(EvalPrediction(predictions=(np.array(tolist(chosen_scores)), np.array(tolist(rejected_scores))),
                                     label_ids=None))
    return {"name": name, "values": tolist(values), "input_ids": tolist(ids), "attention_mask": tolist(mask),
            "loss": loss.item(), "chosen_scores": tolist(chosen_scores), "rejected_scores": tolist(rejected_scores),
            "accuracy": accuracy["accuracy"]}


def write_losses() -> None:
    import llamafactory
    import torch
    import trl

    fix_trl_availability_flags()
    out = {
        "lf_version": llamafactory.__version__, "trl_version": trl.__version__, "torch_version": torch.__version__,
        "ignore_index": IGNORE,
        "dpo": [dpo_case(name, o) for name, o in DPO_CASES],
        "kto": [kto_case(name, o, v) for name, o, v in KTO_CASES],
        "rm": [rm_case(*case) for case in RM_CASES],
    }
    (HERE / "losses.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


def main() -> None:
    write_data()
    tmp = Path(tempfile.mkdtemp())
    try:
        write_encoding(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_losses()


if __name__ == "__main__":
    main()
