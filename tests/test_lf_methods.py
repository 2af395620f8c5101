"""What LLaMA-Factory's result-changing keys do to a run (issue 14, item 3), on the set-up
functions the training job calls: DoRA, rsLoRA, PiSSA, LoRA+, NEFTune, additional_target,
optim, QLoRA's double quantization, eval_dataset, mix_strategy, tokenized_path; and one tiny
run that trains, evaluates on an eval_dataset, and resumes with LoRA+'s parameter groups."""

import json
import math
import sys
import types

import pytest
import torch

from ftui.config.load import demo_config
from ftui.runner.engines import DistInfo
from ftui.runner.engines.base import Engine, build_optimizer, param_groups
from ftui.runner.model import apply_method, load_model
from tests.conftest import DATA, resume_sync, tiny_config, train_sync

MIX_REFERENCE = DATA / "llamafactory_mix" / "reference.json"


def tiny(**over):
    return demo_config(cutoff_len=64, **over)


def lora_model(**over):
    cfg = tiny(finetuning_type="lora", lora_rank=4, **over)
    torch.manual_seed(0)
    return apply_method(load_model(cfg, torch.device("cpu")), cfg), cfg


def q_proj(model):
    return model.base_model.model.model.layers[0].self_attn.q_proj


def test_dora_adds_trained_magnitude_vectors_and_the_adapter_config_says_so(tmp_path):
    model, _ = lora_model(use_dora=True)
    magnitudes = [n for n, p in model.named_parameters() if "lora_magnitude_vector" in n and p.requires_grad]
    assert magnitudes and model.peft_config["default"].use_dora
    plain, _ = lora_model()
    assert not any("lora_magnitude_vector" in n for n, _ in plain.named_parameters())
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["use_dora"] is True


def test_rslora_scales_by_alpha_over_the_root_of_the_rank():
    plain, _ = lora_model(lora_alpha=8)
    stable, _ = lora_model(lora_alpha=8, use_rslora=True)
    assert q_proj(plain).scaling["default"] == pytest.approx(8 / 4)
    assert q_proj(stable).scaling["default"] == pytest.approx(8 / math.sqrt(4))


def test_lora_target_all_and_names():
    every, _ = lora_model(lora_target="all")
    some, _ = lora_model(lora_target="q_proj, v_proj")
    adapted = lambda m: {n.split(".")[-1] for n, mod in m.named_modules() if hasattr(mod, "lora_A")}  # noqa: E731
    assert adapted(every) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # not lm_head
    assert adapted(some) == {"q_proj", "v_proj"}


def test_pissa_starts_from_the_principal_part_and_final_converts_to_plain_lora_over_the_original_base(tmp_path):
    from ftui.runner.weights import save_final, save_pissa_start

    cfg = tiny(finetuning_type="lora", lora_rank=4, pissa_init=True, pissa_iter=-1)
    torch.manual_seed(0)
    original = load_model(cfg, torch.device("cpu"))
    original_q = original.model.layers[0].self_attn.q_proj.weight.detach().clone()
    model = apply_method(original, cfg)
    layer = q_proj(model)
    residual = layer.base_layer.weight.detach()
    start = layer.lora_B["default"].weight @ layer.lora_A["default"].weight * layer.scaling["default"]
    assert not torch.allclose(residual, original_q)  # the base keeps only the rest of W
    assert torch.allclose(residual + start, original_q, atol=1e-5)
    save_pissa_start(model, tmp_path)
    with torch.no_grad():  # "training": move every adapter weight
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    ids = torch.randint(3, 600, (1, 12))
    trained = model(input_ids=ids).logits
    engine = types.SimpleNamespace(full_state_dict=lambda: None, info=DistInfo(), unwrap=lambda: model)
    tokenizer = types.SimpleNamespace(save_pretrained=lambda path: None, chat_template=None)
    save_final(engine, tokenizer, "", tmp_path)
    adapter = json.loads((tmp_path / "final" / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["init_lora_weights"] is True  # rank x 2, plain LoRA

    from peft import PeftModel

    torch.manual_seed(0)
    base = load_model(cfg, torch.device("cpu"))  # the same random weights: the original base
    converted = PeftModel.from_pretrained(base, tmp_path / "final")
    assert torch.allclose(converted(input_ids=ids).logits, trained, atol=1e-4)


def test_loraplus_gives_the_b_matrices_a_larger_learning_rate():
    model, cfg = lora_model(use_dora=True, loraplus_lr_ratio=16.0, learning_rate=1e-4, weight_decay=0.1)
    groups = param_groups(model, cfg)
    assert groups[0]["lr"] == 1e-4  # the base rate first: the one step events report
    names = {id(p): n for n, p in model.named_parameters()}
    lr_of = {names[id(p)]: g["lr"] for g in groups for p in g["params"]}
    assert all(lr == pytest.approx(1.6e-3) for n, lr in lr_of.items() if "lora_B" in n or "magnitude" in n)
    assert all(lr == 1e-4 for n, lr in lr_of.items() if "lora_A" in n)
    assert len(lr_of) == sum(p.requires_grad for p in model.parameters())
    plain, cfg = lora_model(learning_rate=1e-4)
    assert {g["lr"] for g in param_groups(plain, cfg)} == {1e-4}


def test_loraplus_groups_survive_a_checkpoint(tmp_path):
    from transformers import get_scheduler

    def engine_for():
        model, cfg = lora_model(loraplus_lr_ratio=8.0, learning_rate=1e-3)
        engine = Engine(cfg, DistInfo(), torch.device("cpu"))
        engine.prepare(model)
        return engine

    first = engine_for()
    ids = torch.randint(3, 600, (2, 10))
    first.model(input_ids=ids, labels=ids).loss.backward()
    first.step()
    first.save_state(tmp_path)
    second = engine_for()
    second.load_state(tmp_path)
    scheduler = get_scheduler("cosine", second.torch_optimizer(), num_warmup_steps=0, num_training_steps=10)
    assert [g["lr"] for g in second.optimizer.param_groups][:2] == [1e-3, 8e-3]
    assert scheduler.get_last_lr()[1] == pytest.approx(8 * scheduler.get_last_lr()[0])
    a, b = first.optimizer.state_dict()["state"], second.optimizer.state_dict()["state"]
    assert a.keys() == b.keys() and all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)


def test_neftune_adds_bounded_noise_to_the_embeddings_while_training_only():
    cfg = tiny(finetuning_type="full", neftune_noise_alpha=5.0)
    torch.manual_seed(0)
    model = load_model(cfg, torch.device("cpu"))
    ids = torch.randint(3, 600, (2, 16))
    clean = model.get_input_embeddings()(ids).detach().clone()
    apply_method(model, cfg)
    model.train()
    noisy = model.get_input_embeddings()(ids)
    bound = 5.0 / math.sqrt(16 * 128)
    assert not torch.equal(noisy, clean) and (noisy - clean).abs().max() <= bound + 1e-7
    assert (noisy - clean).abs().max() > bound / 2
    model.eval()
    assert torch.equal(model.get_input_embeddings()(ids), clean)


def test_additional_target_trains_that_module_whole_and_saves_it(tmp_path):
    model, _ = lora_model(additional_target="model.norm")
    trained = [n for n, p in model.named_parameters() if p.requires_grad and "modules_to_save" in n]
    assert trained == ["base_model.model.model.norm.modules_to_save.default.weight"]
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    assert any(k.endswith("model.norm.weight") for k in load_file(tmp_path / "adapter_model.safetensors"))


def test_optim_picks_torch_adamw_fused_or_multi_tensor_and_bitsandbytes_classes(monkeypatch):
    model, cfg = lora_model()
    fused = build_optimizer(model, cfg, torch.device("cpu"))
    assert fused.defaults["fused"] is True
    multi = build_optimizer(model, cfg.model_copy(update={"optim": "adamw_torch"}), torch.device("cpu"))
    assert not multi.defaults.get("fused") and multi.defaults["foreach"] is True
    made = {}

    class Fake:
        def __init__(self, name):
            self.name = name

        def __call__(self, groups, **kwargs):
            made.update(name=self.name, groups=groups, kwargs=kwargs)
            return "optimizer"

    fake_optim = types.SimpleNamespace(**{n: Fake(n) for n in ("AdamW8bit", "PagedAdamW8bit", "PagedAdamW32bit", "PagedAdamW")})
    monkeypatch.setitem(sys.modules, "bitsandbytes", types.SimpleNamespace(optim=fake_optim))
    assert build_optimizer(model, cfg.model_copy(update={"optim": "paged_adamw_8bit"}), torch.device("cpu")) == "optimizer"
    assert made["name"] == "PagedAdamW8bit" and made["kwargs"]["lr"] == cfg.learning_rate


@pytest.mark.parametrize("double", [True, False])
def test_qlora_double_quantization_follows_the_config(monkeypatch, double):
    import transformers

    seen = {}
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda path, **kw: seen.update(kw) or "model")
    cfg = tiny().model_copy(update={"model_init": "pretrained", "finetuning_type": "lora", "quantization_bit": 4,
                                                          "double_quantization": double, "quantization_type": "fp4"})
    assert load_model(cfg, torch.device("cpu")) == "model"
    quant = seen["quantization_config"]
    assert quant.bnb_4bit_use_double_quant is double and quant.bnb_4bit_quant_type == "fp4"


def test_mix_strategy_orders_records_as_llamafactory():
    from ftui.data.records import DatasetSpec
    from ftui.runner.data import mix_datasets

    reference = json.loads(MIX_REFERENCE.read_text())
    specs = [DatasetSpec(name=f"d{d}") for d in range(2)]
    loaded = [(specs[d], [{"d": d, "i": i} for i in range(n)]) for d, n in enumerate(reference["sizes"])]
    for case in reference["cases"]:
        probs = ",".join(str(p) for p in case["interleave_probs"]) if case["interleave_probs"] else None
        cfg = tiny(dataset="a,b", mix_strategy=case["mix_strategy"], interleave_probs=probs, seed=case["seed"])
        order = [[r["d"], r["i"]] for spec, records in mix_datasets(loaded, cfg) for r in records]
        assert order == case["order"], case["mix_strategy"]


def test_eval_dataset_is_the_eval_set_and_training_keeps_every_record(demo_tokenizer):
    from ftui.runner.stages import build_datasets

    farm = str(DATA / "farm_qa.json")
    records = len(json.loads((DATA / "farm_qa.json").read_text()))
    data = build_datasets(tiny(eval_dataset=farm, max_samples=None), demo_tokenizer)
    everything = build_datasets(tiny(max_samples=None), demo_tokenizer)
    assert len(data.eval) == records and len(data.train) == len(everything.train)


def test_tokenized_path_is_written_then_read_instead_of_the_datasets(tmp_path, demo_tokenizer):
    from ftui.runner.stages import build_datasets

    saved = tmp_path / "encoded"
    first = build_datasets(tiny(tokenized_path=str(saved), val_size=0.25), demo_tokenizer)
    assert (saved / "dataset_dict.json").is_file() and any("saved the encoded examples" in w for w in first.warnings)
    again = build_datasets(tiny(tokenized_path=str(saved), dataset=str(tmp_path / "gone.json")), demo_tokenizer)
    assert [e.input_ids for e in again.train] == [e.input_ids for e in first.train]
    assert [e.labels for e in again.eval] == [e.labels for e in first.eval] and again.eval
    assert any("read" in w and "tokenized_path" in w for w in again.warnings)


@pytest.mark.dist
def test_a_run_with_loraplus_dora_and_an_eval_dataset_evaluates_on_it_and_resumes(tmp_path):
    cfg = tiny_config(tmp_path, finetuning_type="lora", use_dora=True, loraplus_lr_ratio=4.0, max_steps=4, save_steps=2,
                      eval_steps=2, eval_dataset=str(DATA / "farm_qa.json"), tokenized_path=str(tmp_path / "enc"))
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["eval_examples"] == len(json.loads((DATA / "farm_qa.json").read_text()))
    assert [e["step"] for e in events if e["event"] == "eval"] == [2, 4]
    assert (tmp_path / "enc" / "dataset_dict.json").is_file()
    assert json.loads((run_dir / "final" / "adapter_config.json").read_text())["use_dora"] is True
    resumed, proc = resume_sync(run_dir, run_dir / "checkpoints" / "step-2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["step"] for e in resumed if e["event"] == "step"] == [3, 4]
    assert next(e for e in resumed if e["event"] == "run_end")["status"] == "completed"
    # DoRA's magnitude vectors merge too: the export (final/ and the last checkpoint), loaded
    # without peft, gives the adapter's logits
    import torch

    from tests.test_export import export_in_process, plain_logits, trained_logits

    want = trained_logits(run_dir)
    for which in ("final", "4"):
        out = tmp_path / f"dora-{which}"
        export_in_process(run_dir, out, which)
        got = plain_logits(out)
        assert torch.allclose(got, want, atol=1e-5), (which, (got - want).abs().max())
