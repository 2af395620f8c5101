"""How many logits the chunked loss computes at once: the runner's loss (ftui.runner.loss) cuts
its chunks by these, and the planner (ftui.plan.planner) counts the same chunks' memory. Shared
here, apart from the planner, so the runner reads them without importing it. No torch here.
"""

# The chunked loss (ftui.runner.loss) computes at most this many logits at once.
LOSS_CHUNK_ELEMENTS = 2**26
# With Liger (CUDA), a chunk's logits are at most this many times the last hidden states' size
# (Liger's chunk_mem_const; its default of 1 gave 128-token chunks at Qwen's vocabulary and a
# slower loss than ftui's own chunks, each chunk adding into the fp32 weight gradient).
LIGER_CHUNK_FACTOR = 8
