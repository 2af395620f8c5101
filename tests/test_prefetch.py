"""Micro batches are collated ahead in a background thread: same order as without it,
errors reach the loop, and each step event says how long the loop waited for data."""

from __future__ import annotations

import pytest
import torch

from conftest import ENGINE_MAX_STEPS, steps_of, tiny_config
from ftui.runner.data import Collator, EpochSampler
from ftui.runner.stages import build_datasets
from ftui.runner.feed import Prefetcher, host_batches


def test_prefetched_batches_come_in_the_sources_order(demo_tokenizer, tmp_path):
    cfg = tiny_config(tmp_path, max_samples=24)
    data = build_datasets(cfg, demo_tokenizer)
    sampler = EpochSampler(len(data.train), 4, 0, 1, cfg.seed)
    collator = Collator(demo_tokenizer.pad_token_id)
    plain = host_batches(data.train, sampler, collator, start=3)
    ahead = Prefetcher(host_batches(data.train, sampler, collator, start=3), torch.device("cpu"), depth=4)
    for _ in range(3 * sampler.batches_per_epoch):  # across epoch boundaries
        (e1, b1), (e2, b2) = next(plain), next(ahead)
        assert e1 == e2 and torch.equal(b1.input_ids, b2.input_ids) and torch.equal(b1.labels, b2.labels)


def test_an_error_while_collating_reaches_the_loop():
    def failing():
        raise ValueError("record 7 cannot be collated")
        yield  # pragma: no cover

    stream = Prefetcher(failing(), torch.device("cpu"), depth=2)
    with pytest.raises(ValueError, match="record 7"):
        next(stream)


def test_step_events_say_how_long_the_loop_waited_for_data(engine_runs):
    _run, events = engine_runs("single", "full")  # a run of the session's (CI time)
    waits = [e["data_wait_s"] for e in steps_of(events)]
    assert len(waits) == ENGINE_MAX_STEPS and all(w >= 0 for w in waits)
