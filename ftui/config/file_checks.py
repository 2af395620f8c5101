"""The checks of a config against the files it names: the runs root, a DeepSpeed JSON, the
encoded-data folder, the checkpoint to resume, and the datasets (the registry entry, the files,
their format for the stage and their first records, each converted as the run converts it).

Part of the one preflight (ftui.config.preflight) the launch form and ``ftui train`` share:
what would fail seconds after a start is refused here, before any run directory exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.presets.engine_presets import deepspeed_precision, read_user_deepspeed

FIRST_RECORDS = 32  # the records of each dataset read and converted before a start


def output_dir_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The runs root must be, or be able to become, a directory: a file there (or above it)
    would stop the start with the system's bare "File exists" / "Not a directory"."""
    path = Path(cfg.output_dir).expanduser()
    for above in (path, *path.parents):
        if os.path.isdir(above):
            break
        if os.path.lexists(above):
            return [FieldProblem("output_dir", cfg.output_dir, _("{path} is a file, not a directory: give a directory for the runs "
                                                                 "(it is made when missing)").format(path=above))]
    return []


def deepspeed_file_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The user's DeepSpeed JSON: readable, and not fixing a precision other than the run's."""
    if not cfg.deepspeed:
        return []
    try:
        fixed = deepspeed_precision(read_user_deepspeed(cfg.deepspeed))
    except ValueError as err:
        return [FieldProblem("deepspeed", cfg.deepspeed, _("{error}; give a readable DeepSpeed JSON, or use a zero* engine preset").format(error=err))]
    if fixed and fixed != cfg.precision:
        return [FieldProblem("deepspeed", cfg.deepspeed, _("the file turns {fixed} on but the run is {precision}; set {fixed}: true or set the file's value to \"auto\"").format(
            fixed=fixed, precision=cfg.precision))]
    return []


def saved_data_problems(cfg: RunConfig) -> list[FieldProblem]:
    """tokenized_path (encoded data, or a folder the run may write) and resume_from_checkpoint."""
    out: list[FieldProblem] = []
    if cfg.tokenized_path:
        from ftui.data.registry import tokenized_data_problem

        problem = tokenized_data_problem(cfg.tokenized_path)
        if problem:
            out.append(FieldProblem("tokenized_path", cfg.tokenized_path, problem))
    if cfg.resume_from_checkpoint:
        from ftui.rundir.checkpoints import resume_target_problem

        problem = resume_target_problem(cfg.resume_from_checkpoint)
        if problem:
            out.append(FieldProblem("resume_from_checkpoint", cfg.resume_from_checkpoint, problem))
    return out


UNREAD: Any = object()  # dataset_problems' model when config.json was not read yet


def dataset_problems(cfg: RunConfig, data_needed: bool = True, model: Any = UNREAD) -> list[FieldProblem]:
    """The datasets of ``dataset`` and ``eval_dataset``: their registry entries (they stay in
    dataset_dir, fit the stage, hold media the stage can train) and, with ``data_needed``, that
    each names a file here or a hub dataset, and that each file's first records read (a bad
    JSON line named by its number), fit the stage and convert as the run converts them (a bad
    record named by its index), their images opened and decoded (ftui.config.media_checks).
    A dataset with images is also checked against the model, the template, packing and
    tokenized_path (``model``: its config.json as preflight read it, read here when UNREAD
    and a dataset has images). ``data_needed`` False (``ftui plan --gpu-memory``): the data
    may be on another machine, only the registry is read. A hub dataset is loaded by the run."""
    from ftui.config.media_checks import first_records_media, media_config_problems
    from ftui.config.model_checks import read_model
    from ftui.data.media import dataset_media
    from ftui.data.records import DataFormatError
    from ftui.data.dataset_files import HubDataset, read_records
    from ftui.data.stage_formats import check_format, record_preview
    from ftui.data.registry import dataset_path_problem, resolve_datasets

    from ftui.data.registry import TOKENIZED_MARKER

    out: list[FieldProblem] = []
    read = [model]  # config.json, read at most once, when a dataset has images
    encoded = bool(cfg.tokenized_path) and (Path(cfg.tokenized_path).expanduser() / TOKENIZED_MARKER).is_file()

    def media_problems(spec: Any, key: str, first: Any = None) -> list[FieldProblem]:
        from ftui.config.audio_checks import audio_config_problems

        media = dataset_media(spec, first)
        if not {"images", "videos", "audios"} & set(media):
            return []
        if read[0] is UNREAD:
            read[0] = read_model(cfg.model_name_or_path)
        found = media_config_problems(cfg, spec, key, read[0], first) if {"images", "videos"} & set(media) else []
        return [p for p in found + audio_config_problems(cfg, spec, key, read[0], media) if p not in out]

    for key in ("dataset", "eval_dataset"):
        text = getattr(cfg, key)
        if not text:
            continue
        problem = dataset_path_problem(text, cfg.dataset_dir, cfg.stage, unresolved=data_needed)
        if problem is None:
            try:
                specs = resolve_datasets(text, cfg.dataset_dir)
            except (DataFormatError, OSError, ValueError):
                specs = []  # said by dataset_path_problem where it matters (unresolved)
            for spec in specs:
                out += media_problems(spec, key)
        if problem is None and data_needed and not encoded:  # tokenized_path's encoded data is read instead of the files
            try:
                for spec in resolve_datasets(text, cfg.dataset_dir):
                    try:
                        records = read_records(spec, limit=FIRST_RECORDS)
                    except HubDataset:
                        continue
                    if not records:
                        raise DataFormatError(_("dataset {name} has no records").format(name=repr(spec.name)))
                    check_format(spec, records[0], cfg.stage)
                    for i, record in enumerate(records):
                        record_preview(record, spec, i, cfg.stage)
                    if not spec.explicit_format:  # a file given by path: its media are known from its first record
                        out += media_problems(spec, key, records[0])
                    first_records_media(spec, records)
            except DataFormatError as err:
                problem = str(err)
            except (OSError, ValueError) as err:  # an unreadable file or folder, parquet that is not
                problem = _("cannot read it: {error}").format(error=err)
        if problem:
            out.append(FieldProblem(key, text, problem))
    return out
