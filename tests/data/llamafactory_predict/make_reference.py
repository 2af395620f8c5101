"""Make the predict-metric reference numbers with LLaMA-Factory 0.9.5 itself.

Run in a venv with llamafactory==0.9.5 and nltk, jieba, rouge-chinese (NOT ftui's venv):

    /path/to/lf-venv/bin/python tests/data/llamafactory_predict/make_reference.py

The texts are encoded with a real byte-level tokenizer (tests/data/families_tokenizer) and handed to
LLaMA-Factory's own ComputeSimilarity as an EvalPrediction padded with IGNORE_INDEX, the way its
Seq2Seq trainer calls it after generation, so the decoding is LLaMA-Factory's too. Every decoded
text is checked to round-trip to the input. Writes generated_predictions.jsonl (LLaMA-Factory's
layout: prompt, predict, label) and reference.json (each example's scores and the corpus means).
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer, EvalPrediction

from llamafactory.extras.constants import IGNORE_INDEX
from llamafactory.train.sft.metric import ComputeSimilarity

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE.parent / "families_tokenizer"

LONG_EN = (
    "Fine-tuning adapts a pretrained language model to a narrower task by continuing its training "
    "on examples of that task. Low-rank adaptation freezes the original weights and learns two small "
    "matrices per layer whose product is added to the frozen projection, which cuts the memory needed "
    "for optimizer states by orders of magnitude. The learning rate, the rank and the number of epochs "
    "matter most; a rank of eight is a common start, and a learning rate around one in ten thousand "
    "works for many models. Evaluate on held-out data, watch the loss curve, and stop when the "
    "validation loss rises while the training loss keeps falling."
)
LONG_ZH = (
    "微调是在预训练语言模型的基础上，用特定任务的数据继续训练，使模型更好地完成该任务。低秩适配冻结原始权重，"
    "只为每一层学习两个小矩阵，它们的乘积加到冻结的投影上，从而把优化器状态所需的显存降低几个数量级。"
    "学习率、秩和训练轮数最为重要；秩取八是常见的起点，学习率取万分之一左右对许多模型都适用。"
    "请在留出的数据上评估，观察损失曲线，当验证损失上升而训练损失仍在下降时就应停止训练。"
)

# (name, prediction, label)
EN = [
    ("identical", "The capital of France is Paris.", "The capital of France is Paris."),
    ("one word differs", "The capital of France is Lyon.", "The capital of France is Paris."),
    ("empty prediction", "", "Paris is the capital of France."),
    ("punctuation only", "!!! ... ???", "Yes, it is."),
    ("numbers", "The answer is 42.", "The answer is 42.0"),
    ("decimals", "3.14159", "3.14"),
    ("reordered", "Paris is the capital of France", "The capital of France is Paris"),
    ("case differs", "HELLO WORLD", "hello world"),
    ("newlines", "Step 1: mix.\nStep 2: bake.\n\nDone.", "Step 1: mix the flour.\nStep 2: bake it.\nDone."),
    ("long paragraph", LONG_EN, LONG_EN.replace("eight", "sixteen").replace("Evaluate", "Always evaluate")),
    ("unrelated", "Bananas are yellow.", "The sky is blue."),
    ("single word", "Yes", "Yes"),
    ("single characters", "a", "b"),
    ("repeated word", "the the the the the the", "the cat sat on the mat"),
    ("code", "def f(x):\n    return x * 2", "def f(x):\n    return 2 * x"),
    ("question marks split sentences", "Why? Because it rains? Yes.", "Why? Because it is raining."),
    ("trailing spaces", "Paris.   ", "Paris."),
    ("empty label", "Something else.", ""),
    ("both empty", "", ""),
    ("accents", "Café au lait, s'il vous plaît.", "Un café au lait, s'il vous plaît."),
    ("six dots split sentences", "Well...... maybe later.", "Maybe later."),
]
ZH = [
    ("identical", "北京是中国的首都。", "北京是中国的首都。"),
    ("reordered", "北京是中国的首都。", "中国的首都是北京。"),
    ("empty prediction", "", "我不知道。"),
    ("punctuation only", "，。！？", "好的。"),
    ("numbers", "答案是42。", "答案是四十二。"),
    ("mixed with English", "我喜欢用Python写代码。", "我喜欢用 Python 编程。"),
    ("mixed technical", "GPU显存不足，请减小batch size。", "显存不够，把 batch size 调小。"),
    ("newlines", "第一步：准备材料。\n第二步：开始烹饪。", "第一步：准备食材。\n第二步：烹饪。\n第三步：装盘。"),
    ("long paragraph", LONG_ZH, LONG_ZH.replace("八", "十六").replace("请在", "务必在")),
    ("unrelated", "今天天气很好。", "我明天要去上海出差。"),
    ("single character", "是", "是"),
    ("quotes", "他说：“你好！”然后走了。", "他说：“你好。”"),
    ("traditional vs simplified", "機器學習", "机器学习"),
    ("repeated character", "好好好好好", "好的，没问题。"),
    ("poem", "床前明月光，疑是地上霜。", "床前明月光，疑似地上霜。"),
    ("numbers and units", "温度是25°C，湿度60%。", "温度25摄氏度，湿度百分之六十。"),
    ("question", "你叫什么名字？我叫小明。", "你叫什么名字？我是小红。"),
    ("ellipsis", "嗯……让我想想……", "让我想一想。"),
    ("emoji", "好的👍", "好的😊"),
    ("English answer", "I don't know.", "我不知道。"),
    ("full-width spaces", "你好　世界", "你好，世界"),
]


def prompt_for(name: str) -> str:
    return f"<|im_start|>user\nCase: {name}<|im_end|>\n<|im_start|>assistant\n"


def padded(rows: list[list[int]]) -> np.ndarray:
    width = max(1, max(len(r) for r in rows))
    return np.array([r + [IGNORE_INDEX] * (width - len(r)) for r in rows], dtype=np.int64)


def lf_scores(tokenizer, cases) -> tuple[list[dict], dict]:
    """LLaMA-Factory's per-example scores and corpus means for (name, predict, label) cases."""
    preds = [tokenizer.encode(p, add_special_tokens=False) for _, p, _ in cases]
    labels = [tokenizer.encode(lab, add_special_tokens=False) for _, _, lab in cases]
    for (name, pred, label), p_ids, l_ids in zip(cases, preds, labels):
        for text, ids in ((pred, p_ids), (label, l_ids)):
            decoded = tokenizer.decode(ids, skip_special_tokens=True)
            assert decoded == text, f"{name}: {text!r} decodes as {decoded!r}"
    metric = ComputeSimilarity(tokenizer=tokenizer)
    metric(EvalPrediction(predictions=padded(preds), label_ids=padded(labels)), compute_result=False)
    per_example = [{k: metric.score_dict[k][i] for k in metric.score_dict} for i in range(len(cases))]
    means = {f"predict_{k}": v for k, v in metric._dump().items()}  # the trainer's metric_key_prefix
    return per_example, means


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER))
    tokenizer.pad_token = tokenizer.eos_token  # as LLaMA-Factory's patch_tokenizer does when none
    cases = [("en", *c) for c in EN] + [("zh", *c) for c in ZH]
    per_example, corpus_all = lf_scores(tokenizer, [c[1:] for c in cases])
    _, corpus_en = lf_scores(tokenizer, EN)
    _, corpus_zh = lf_scores(tokenizer, ZH)

    with open(HERE / "generated_predictions.jsonl", "w", encoding="utf-8") as f:
        for _, name, pred, label in cases:
            f.write(json.dumps({"prompt": prompt_for(name), "predict": pred, "label": label}, ensure_ascii=False) + "\n")
    reference = {
        "made_by": "LLaMA-Factory's ComputeSimilarity (llamafactory/train/sft/metric.py), see README.md",
        "versions": {p: version(p) for p in ("llamafactory", "transformers", "nltk", "jieba", "rouge-chinese")},
        "examples": [{"lang": lang, "name": name, "scores": s} for (lang, name, _, _), s in zip(cases, per_example)],
        "corpus": {"all": corpus_all, "en": corpus_en, "zh": corpus_zh},
    }
    (HERE / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(reference["corpus"], indent=1))


if __name__ == "__main__":
    main()
