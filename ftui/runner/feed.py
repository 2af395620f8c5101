"""The training loop's supply of micro batches: this rank's share, in a resumable order,
collated ahead of time in a background thread."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator

import torch

from ftui.runner.data import EpochSampler, Example


def host_batches(train: list[Example], sampler: EpochSampler, collator: Callable[[list[Example]], Any],
                 start: int = 0) -> Iterator[tuple[int, Any]]:
    """Endless (epoch, batch) stream over the training rows, this rank's share, collated
    on the host (pinned on CUDA), from the ``start``-th micro batch overall (a resumed run
    continues exactly where it stopped)."""
    epoch, offset = divmod(start, sampler.batches_per_epoch)
    while True:
        for idx in sampler.batches(epoch, offset):
            yield epoch, collator([train[i] for i in idx])
        epoch += 1
        offset = 0


class Prefetcher:
    """Collates the next micro batches in a background thread while the current one computes,
    so the loop waits for data only when collation is slower than a step; ``waited`` adds up
    the time the loop did wait (reported per step as ``data_wait_s``). The order is the
    source's, so exact resume is unaffected. A thread, not DataLoader workers: collation is a
    few list operations and one tensor per field, the records are already tokenized, and
    worker processes would each copy the whole dataset."""

    def __init__(self, source: Iterator[tuple[int, Any]], device: torch.device, depth: int):
        self.device = device
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.waited = 0.0
        self.thread = threading.Thread(target=self._fill, args=(source,), name="ftui-prefetch", daemon=True)
        self.thread.start()

    def _fill(self, source: Iterator[tuple[int, Any]]) -> None:
        try:
            for item in source:
                self.queue.put(item)
        except BaseException as exc:  # handed to the loop, which raises it
            self.queue.put(exc)

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> tuple[int, Any]:
        began = time.perf_counter()
        item = self.queue.get()
        self.waited += time.perf_counter() - began
        if isinstance(item, BaseException):
            raise item
        epoch, batch = item
        return epoch, batch.to(self.device)
