"""Writes reference.json: the order in which LLaMA-Factory 0.9.5 (its merge_dataset, over
`datasets`) mixes two datasets of 4 and 9 records for each mix_strategy, with and without
interleave_probs, at seed 42. Runs only where LLaMA-Factory is installed:

    /work/lfvenv/bin/python tests/data/llamafactory_mix/make_reference.py
"""

import json
from pathlib import Path
from types import SimpleNamespace

from datasets import Dataset
from llamafactory.data.data_utils import merge_dataset

SIZES = (4, 9)
cases = []
for strategy in ("concat", "interleave_under", "interleave_over"):
    for probs in (None, [0.3, 0.7]):
        if strategy == "concat" and probs:
            continue
        parts = [Dataset.from_dict({"d": [d] * n, "i": list(range(n))}) for d, n in enumerate(SIZES)]
        args = SimpleNamespace(mix_strategy=strategy, interleave_probs=probs, streaming=False)
        mixed = merge_dataset(parts, args, seed=42)
        cases.append({"mix_strategy": strategy, "interleave_probs": probs, "seed": 42,
                      "order": [[d, i] for d, i in zip(mixed["d"], mixed["i"])]})
out = Path(__file__).with_name("reference.json")
out.write_text(json.dumps({"sizes": SIZES, "cases": cases}, indent=0) + "\n")
print(f"{len(cases)} cases -> {out}")
