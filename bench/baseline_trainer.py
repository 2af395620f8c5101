"""The baseline: the plain ``transformers.Trainer`` fine-tune a user would otherwise write.

Reads the same ftui YAML the runner gets (model, dataset, precision, batch, steps, learning
rate) and trains with the stock pieces: ``datasets`` for the records, the tokenizer's chat
template for the prompt/answer split, ``DataCollatorForSeq2Seq`` (pads each batch to its
longest example), ``Trainer`` with its default optimizer. Nothing ftui-specific is used
beyond reading the YAML and resolving the demo model's directory.

It records, per optimizer step on this rank, the wall time at the end of the step and the
real (non-padding) tokens of the batch, into ``OUT.rank<N>.json``; ``bench/throughput.py``
turns those into tokens/s the same way it does for ftui's step events.

Run: python bench/baseline_trainer.py CONFIG.yaml OUT   (or under torchrun for DDP)
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import yaml
from datasets import Dataset
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                          TrainerCallback, TrainingArguments)

from ftui.rundir.paths import resolve_model_path


def load_records(cfg: dict) -> list[dict]:
    path = cfg["dataset"]
    if not os.path.isabs(path):
        path = os.path.join(cfg.get("dataset_dir", "data"), path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)  # alpaca records


def tokenize(tokenizer, record: dict, cutoff: int) -> dict:
    prompt = record["instruction"] + ("\n" + record["input"] if record.get("input") else "")
    user = [{"role": "user", "content": prompt}]
    prompt_ids = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=True, return_dict=False)
    full_ids = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": record["output"]}], tokenize=True, return_dict=False)
    ids = list(full_ids)[:cutoff]
    labels = ([-100] * len(prompt_ids) + ids[len(prompt_ids):])[:cutoff]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}


class StepClock(TrainerCallback):
    """Wall time at the end of every optimizer step (what ftui's step events carry)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.time())


class CountingCollator(DataCollatorForSeq2Seq):
    """The stock collator, counting the real tokens of every batch it builds."""

    real_tokens: list[int] = []

    def __call__(self, features, return_tensors=None):
        batch = super().__call__(features, return_tensors)
        self.real_tokens.append(int(batch["attention_mask"].sum()))
        return batch


def main() -> None:
    config_path, out = sys.argv[1], sys.argv[2]
    with open(config_path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    path = resolve_model_path(cfg["model_name_or_path"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(cfg.get("seed", 42))
    if cfg.get("model_init") == "random":
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), attn_implementation="sdpa")
    else:
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    records = load_records(cfg)
    train = Dataset.from_list(records).map(lambda r: tokenize(tokenizer, r, cfg.get("cutoff_len", 2048)),
                                           remove_columns=list(records[0]))
    cpu = cfg.get("device") == "cpu" or not torch.cuda.is_available()
    args = TrainingArguments(
        output_dir=os.path.dirname(os.path.abspath(out)) + "/baseline_out",
        per_device_train_batch_size=cfg.get("per_device_train_batch_size", 1),
        gradient_accumulation_steps=cfg.get("gradient_accumulation_steps", 1),
        learning_rate=cfg.get("learning_rate", 1e-4), max_steps=cfg["max_steps"],
        lr_scheduler_type=cfg.get("lr_scheduler_type", "cosine"), weight_decay=cfg.get("weight_decay", 0.0),
        bf16=cfg.get("bf16", False), fp16=cfg.get("fp16", False), use_cpu=cpu,
        logging_steps=10**9, save_strategy="no", report_to=[], seed=cfg.get("seed", 42),
        dataloader_num_workers=0, disable_tqdm=True,
        ddp_backend="gloo" if cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
    )
    clock = StepClock()
    collator = CountingCollator(tokenizer, padding=True, pad_to_multiple_of=None if cpu else 8)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=collator, callbacks=[clock])
    trainer.train()
    rank = int(os.environ.get("RANK", "0"))
    accum = args.gradient_accumulation_steps
    per_step = [sum(collator.real_tokens[i * accum:(i + 1) * accum]) for i in range(len(clock.times))]
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() and not cpu else None
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"times": clock.times, "real_tokens": per_step, "peak_allocated": peak}, f)


if __name__ == "__main__":
    main()
