"""Finding datasets: names in a ``dataset_info.json`` registry (LLaMA-Factory's own file works),
local json / jsonl / parquet / txt files, or ``datasets`` hub names, as ``DatasetSpec``; and
the checks made from the registry alone before a run starts (an entry that leaves dataset_dir,
media the stage cannot train (ftui.data.media), one that does not fit the stage; a ``tokenized_path`` that holds no encoded
data). No torch here: the launch form and the CLI check with this same code.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json, short_repr
from ftui.i18n import _
from ftui.data.records import EXPECTED, DataFormatError, DatasetPathError, DatasetRefused, DatasetSpec, _clip
from ftui.rundir.paths import DEMO_DATASET, DEMO_DATASET_FILE

BUILTIN_REGISTRY = {DEMO_DATASET: {"file_name": str(DEMO_DATASET_FILE)}}


def load_registry(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir).expanduser() / "dataset_info.json"
    if not _exists(path):
        return {}
    try:
        data = load_json(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataFormatError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    if not isinstance(data, dict):
        raise DataFormatError(_("{path} must map dataset names to entries").format(path=path))
    return data


def unknown_dataset_message(name: str, registry: dict[str, Any], dataset_dir: str) -> str:
    """What a dataset name that is neither registered nor a file says: the registry names
    closest to it; or, when dataset_info.json is not there at all, that (with the directory
    a relative dataset_dir was read from: a run started elsewhere reads it from here)."""
    where = Path(dataset_dir).expanduser() / "dataset_info.json"
    shown = repr(_clip(name, 200))
    if name.startswith(("/", "./", "../", "~")) or Path(name).suffix.lower() in (".json", ".jsonl", ".parquet", ".txt", ".csv"):
        if Path(name).expanduser().is_absolute():
            return _("dataset {name}: no such file").format(name=shown)
        return _("dataset {name}: no such file here ({cwd}) or in dataset_dir ({dir})").format(
            name=shown, cwd=_clip(os.getcwd(), 200), dir=_clip(dataset_dir, 200))
    if not _exists(where):
        relative = "" if where.is_absolute() else " " + _("(dataset_dir {dir} is read from the current directory, {cwd})").format(
            dir=repr(_clip(dataset_dir, 200)), cwd=_clip(os.getcwd(), 200))
        return _("dataset {name} is not a file, and there is no {registry}{relative}; point dataset_dir at the folder that holds "
                 "dataset_info.json (--set dataset_dir=PATH; ftui predict / eval: --dataset-dir PATH), or give a "
                 ".json/.jsonl/.parquet/.txt path or a hub name").format(
                     name=shown, registry=_clip(str(where), 200), relative=relative)
    close = difflib.get_close_matches(name, list(registry), n=3, cutoff=0.6)
    if close:
        known = _("did you mean {names}?").format(names=", ".join(_clip(k, 40) for k in close))
    else:
        names = sorted(registry)
        known = _("known: {names}").format(names=", ".join(_clip(k, 40) for k in names[:8]) or _("none"))
        if len(names) > 8:
            known += " " + _("... {n} in all").format(n=len(names))
    return _("dataset {name} is neither in {registry} ({known}) nor a file; give a registry name, a "
             ".json/.jsonl/.parquet/.txt path or a hub name").format(name=shown, registry=_clip(str(where), 200), known=known)


def resolve_datasets(dataset: str, dataset_dir: str) -> list[DatasetSpec]:
    """The comma-separated ``dataset`` setting as specs: registry names first, then file paths."""
    registry = load_registry(dataset_dir)
    specs = []
    for name in [n.strip() for n in dataset.split(",") if n.strip()]:
        entry = registry.get(name) or BUILTIN_REGISTRY.get(name)
        if entry is not None:
            specs.append(_spec_from_entry(name, entry, dataset_dir if name in registry else None))
            continue
        path = Path(name).expanduser()
        if not path.is_absolute() and not _exists(path):
            path = Path(dataset_dir).expanduser() / name
        if _exists(path):
            specs.append(DatasetSpec(name=name, file_name=str(path), explicit_format=False, media_dir=dataset_dir))
        elif "/" in name and not name.startswith((".", "/", "~")) and len(name) < 200:
            specs.append(DatasetSpec(name=name, hf_hub_url=name, explicit_format=False))
        else:
            raise DataFormatError(unknown_dataset_message(name, registry, dataset_dir))
    return specs


def dataset_path_problem(dataset: str, dataset_dir: str, stage: str | None = None, unresolved: bool = False) -> str | None:
    """Why a registry entry of ``dataset`` is refused (it leaves dataset_dir; or, given the
    ``stage``, it has media the stage cannot train in this slice (videos; images outside sft),
    or its entry says it does not fit: a ranking set for sft, none for dpo), else None. Checked before a run starts (CLI, form) from the registry alone; other
    dataset problems are left to the run, which reports them with the offending record.
    ``unresolved``: also a name that is neither in the registry nor a file nor a hub name, or
    an unreadable registry (the CLI refuses those before starting a job that would fail; the
    form's preview says them in its own place)."""
    if unresolved and not [n for n in dataset.split(",") if n.strip()]:
        return _("no dataset given; name one from dataset_info.json or give a file")
    try:
        specs = resolve_datasets(dataset, dataset_dir)
    except (DatasetPathError, DatasetRefused) as err:
        return str(err)
    except DataFormatError as err:
        return str(err) if unresolved else None
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if stage is not None:
        from ftui.data.media import media_refusal
        from ftui.data.preference_records import registry_fit_problem

        for spec in specs:
            problem = media_refusal(spec, stage) or registry_fit_problem(spec, stage)
            if problem:
                return problem
    return None


def media_job_problem(dataset: str, dataset_dir: str, kind: str, model_type: str | None) -> str | None:
    """Why a predict or eval job cannot read ``dataset`` with a model of ``model_type`` (its
    config.json's; None: not known here, the job's runner says it): the dataset has images or
    videos and the model reads text only, or videos and the model's family reads images only
    (LLaVA-1.5, Gemma 3, InternVL 3). Images are read for the families ftui trains
    (ftui.presets.vision_families), videos for the Qwen ones; audios are refused with the
    dataset (``dataset_path_problem``: ftui.data.media.media_refusal)."""
    from ftui.data.media import dataset_media
    from ftui.presets.vision_families import vision_family

    if model_type is None:
        return None
    family = vision_family(model_type)
    try:
        specs = resolve_datasets(dataset, dataset_dir)
    except (DataFormatError, OSError, ValueError):
        return None  # dataset_path_problem names it
    for spec in specs:
        media = dataset_media(spec)
        if family is None and "images" in media:
            return _("dataset {name} has images, but the model (model_type {model_type}) reads text only: ftui {kind} over "
                     "images needs a vision-language model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL); give a text dataset").format(
                name=repr(spec.name), model_type=str(model_type)[:40], kind=kind)
        if "videos" in media and (family is None or "videos" not in family.media):
            return _("dataset {name} has videos, but the model (model_type {model_type}) does not read videos: ftui {kind} over "
                     "videos needs Qwen2-VL, Qwen2.5-VL or Qwen3-VL; give a dataset without videos").format(
                name=repr(spec.name), model_type=str(model_type)[:40], kind=kind)
    return None


TOKENIZED_MARKER = "dataset_dict.json"  # what `datasets`' save_to_disk writes (ftui's and LLaMA-Factory's tokenized_path)


def tokenized_data_problem(path_text: str) -> str | None:
    """Why ``tokenized_path`` cannot be used: it exists but is not encoded data saved by ftui
    or LLaMA-Factory (a folder with dataset_dict.json). A missing folder is fine: the run writes it."""
    path = Path(path_text).expanduser()
    if not _exists(path):
        return None
    if not path.is_dir():
        return _("this is a file; tokenized_path names a folder (written by the first run, read by later ones)")
    if not (path / TOKENIZED_MARKER).is_file() and any(path.iterdir()):
        return _("this folder holds no encoded data ({marker} is missing) and is not empty; "
                 "give a new folder (the run writes it) or one an earlier run wrote").format(marker=TOKENIZED_MARKER)
    return None


def _exists(path: Path) -> bool:
    """Path.exists, False where the name cannot even be looked up (a 100 KB paste: ENAMETOOLONG)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _spec_from_entry(name: str, entry: dict[str, Any], dataset_dir: str | None) -> DatasetSpec:
    file_name = entry.get("file_name")
    if file_name and dataset_dir is not None:
        file_name = registry_path(name, str(file_name), dataset_dir)
    fmt = entry.get("formatting", "alpaca")
    if fmt not in EXPECTED:
        raise DataFormatError(_("dataset {name} has formatting {formatting}; ftui reads alpaca and sharegpt").format(
            name=repr(name), formatting=short_repr(fmt)))
    return DatasetSpec(
        name=name, file_name=file_name, hf_hub_url=entry.get("hf_hub_url"), formatting=fmt,
        columns=entry.get("columns", {}) or {}, tags=entry.get("tags", {}) or {},
        split=entry.get("split", "train"), subset=entry.get("subset"), ranking=bool(entry.get("ranking")),
        media_dir=str(dataset_dir or ".") if file_name else None,  # LLaMA-Factory: media_dir is dataset_dir; a hub set's paths as written
    )


def registry_path(name: str, file_name: str, dataset_dir: str) -> str:
    """A registry entry's file, which must stay inside dataset_dir. Checked on the path as
    written (no symlink is followed): a link the user placed inside dataset_dir is their
    choice, an absolute path or a ``..`` in the registry entry is not."""
    root = os.path.normpath(os.path.abspath(Path(dataset_dir).expanduser()))
    joined = os.path.normpath(os.path.join(root, file_name))
    if Path(file_name).is_absolute() or os.path.commonpath([root, joined]) != root:
        raise DatasetPathError(
            _("dataset {name} in {registry}: file_name {file_name} leaves dataset_dir; registry entries may only name files "
              "inside {root} (copy or link the file there, or give its path as the dataset instead)").format(
                name=repr(_clip(name, 80)), registry=_clip(str(Path(dataset_dir) / "dataset_info.json"), 200),
                file_name=repr(_clip(file_name, 200)), root=_clip(root, 200))
        )
    return joined
