"""What the one-node launcher (ftui.jobs.spawn) tells each rank through its environment, named
once for both sides: the launcher sets these, the runner (ftui.runner.distributed) reads them,
and neither imports the other. No torch here.
"""

STORE_ENV = "FTUI_STORE"  # the file ranks meet through when they join a group (engines.process_group)
# Set beside OMP_NUM_THREADS=1 when that is the launcher's default, not the user's: a rank that
# computes on the CPU then takes its share of the cores (ftui.runner.distributed.cpu_threads)
THREADS_DEFAULTED_ENV = "FTUI_OMP_DEFAULTED"
