"""Every name in a run directory, and where the shipped demo lives, defined once.

The run directory is the contract between the jobs (torch processes) and everything that
reads a run (dashboard, CLI, runs list): see docs/architecture.md. No torch here.
"""

from __future__ import annotations

import os
from pathlib import Path

# --- A run directory
CONFIG_FILE = "config.yaml"  # the resolved RunConfig the job reads
LAUNCH_FILE = "launch.json"  # the supervisor's pid, start time, host and command
EVENTS_FILE = "events.jsonl"  # the event stream (ftui.rundir.events), written by rank 0
LOG_FILE = "train.log"  # every process's stdout and stderr
ROLLOUTS_FILE = "rollouts.jsonl"  # grpo / ppo: every completion and its rewards (ftui.rundir.rollouts), written by rank 0
ROLLOUTS_OLDER_FILE = "rollouts.old.jsonl"  # the rollouts file before it reached its cap (the one before is dropped)
DATA_FINGERPRINT_FILE = "data_fingerprint.json"  # each dataset file's path, size and sha256 at the start (a resume compares)
RESERVE_FILE = ".run-end-reserve"  # room kept on disk for the final run_end
CHECKPOINTS_DIR = "checkpoints"  # checkpoints/step-N/, complete or absent
FINAL_DIR = "final"  # the trained model or adapter + tokenizer, loadable by transformers / peft
BASE_MODEL_DIR = "base_model"  # a random-weight base (model_init: random), kept so adapters load
PISSA_INIT_DIR = "pissa_init"  # PiSSA's starting adapter (pissa_init): final/ is converted against it to plain LoRA
HEARTBEAT_DIR = "heartbeat"  # one file per rank, touched as it makes progress
LOCK_FILE = "job.lock"  # flock'ed by the job's supervisor for its whole life: one job per run directory
STOP_FILE = "stop_requested"  # written by Stop before it signals: a run that ends without run_end was stopped
STORE_PREFIX = ".store-"  # the one-node launcher's FileStore, removed when it ends
TENSORBOARD_DIR = "tensorboard"  # report_to tensorboard: TensorBoard's event files of the run
WANDB_DIR = "wandb"  # report_to wandb: W&B's own folder (wandb.init(dir=RUN_DIR) names it so)
# Several nodes: every node's ranks write their part of each checkpoint into node 0's run
# directory (on a filesystem the nodes share); node K > 0 keeps its supervisor's own records
# (launch.json, job.lock, train.log, an events.jsonl with its run_end) in RUN/nodes/node-K
NODES_DIR = "nodes"
# launcher: slurm (docs/clusters.md): the batch script ftui writes and submits, the batch step's
# output, Slurm's verdict on the job kept once Slurm says it (Slurm forgets ended jobs after
# MinJobAge), the marker a time-limit warning leaves for the requeued life, and the shared-FS probe
SLURM_SCRIPT_FILE = "slurm.sh"
SLURM_OUTPUT_PATTERN = "slurm-%j.out"  # sbatch --output (Slurm puts the job id for %j)
SLURM_END_FILE = "slurm_end.json"
REQUEUE_FILE = "requeue_requested"
SLURM_PROBE_PREFIX = ".slurm-probe-"

# --- Evaluate & Predict jobs: each in a directory of its own inside the run (RUN/predict/ID,
# RUN/eval/ID) laid out as a run directory (config.yaml, events.jsonl, train.log, job.lock),
# so the same launcher, supervisor, Stop, attach and watch serve them
PREDICT_DIR = "predict"
EVAL_DIR = "eval"
EXPORT_DIR = "export"  # export jobs (RUN/export/ID); what they write goes to the out dir the user chose
SERVE_DIR = "serve"  # serve jobs (RUN/serve/ID): an OpenAI-compatible API over the run's model (ftui serve)
JOB_SPEC_FILE = "job.json"  # what the job does: the model source, datasets, generation settings
PREDICTIONS_FILE = "generated_predictions.jsonl"  # LLaMA-Factory's name: {"prompt", "predict", "label"} a line
PREDICT_RESULTS_FILE = "predict_results.json"  # LLaMA-Factory's metric names, and the job's speed
EVAL_RESULTS_FILE = "eval_results.json"  # the eval event's fields

# --- Inside checkpoints/step-N/
TRAINER_STATE = "trainer_state.json"  # step, data position, scheduler, scaler; written last, before the rename
STATE_DIR = "state"  # the torch engines' DCP checkpoint of model (or adapter) + optimizer
DEEPSPEED_TAG = "deepspeed"  # DeepSpeed's own checkpoint (its tag directory)


def node_dir(run_dir: Path, node_rank: int) -> Path:
    """Where a node's supervisor keeps its records: the run directory itself on node 0."""
    return run_dir if node_rank == 0 else run_dir / NODES_DIR / f"node-{node_rank}"


def rng_file(rank: int) -> str:
    """Each rank's RNG states inside a checkpoint."""
    return f"rng-{rank}.pt"


# --- The user's own ftui directory (FTUI_HOME)
RUNS_DIR = "runs"  # FTUI_HOME/runs: the default runs root, whatever the current directory
RUN_INDEX_FILE = "run-index"  # FTUI_HOME/run-index: one line per run created outside it (output_dir)


def ftui_home() -> Path:
    """Where a user's runs and run index live: ``$FTUI_HOME``, else ``$XDG_DATA_HOME/ftui``,
    else ``~/.local/share/ftui``. Per user, not per current directory: a run started in one
    directory must be listed from any other."""
    home = os.environ.get("FTUI_HOME")
    if home:
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME")
    base = Path(data).expanduser() if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "ftui"


def default_runs_root() -> str:
    return str(ftui_home() / RUNS_DIR)


# --- What ships with ftui
PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
ENGINE_PRESETS_DIR = PRESETS_DIR / "engines"
DEMO_DIR = PRESETS_DIR / "demo"
DEMO_MODEL = "ftui-demo"  # a model name that means the shipped tiny Llama config + tokenizer
DEMO_MODEL_DIR = DEMO_DIR / "model"
DEMO_DATASET = "ftui_demo"  # a dataset name that means the shipped Q&A set
DEMO_DATASET_FILE = DEMO_DIR / "dataset.json"


def resolve_model_path(name: str) -> str:
    """A model name as a path transformers can load: the demo's name is its shipped directory."""
    return str(DEMO_MODEL_DIR) if name == DEMO_MODEL else name
