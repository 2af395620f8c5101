"""Where a record's media files are: a stand-in with the signature of ``ftui.data.media``'s
``record_media`` (the app side's, with its full checks), used until that module is in the tree;
the lead swaps the import at the merge.

Paths are LLaMA-Factory's (``converter.py``, ``_find_medias``): one path or a list, each joined
to the dataset folder when a file is there, else taken as written (absolute). Videos and audios
are refused by name: this slice of ftui trains on images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.data.records import DataFormatError, DatasetSpec

MEDIA = ("images", "videos", "audios")


def dataset_folder(spec: DatasetSpec) -> Path:
    """The folder relative media paths start from (LLaMA-Factory's media_dir, its dataset_dir)."""
    folder = getattr(spec, "dataset_dir", None) or getattr(spec, "media_dir", None)
    if folder:
        return Path(folder)
    return Path(spec.file_name).parent if spec.file_name else Path(".")


def record_media(record: dict[str, Any], spec: DatasetSpec, index: int) -> dict[str, list[str]]:
    """The record's media files per column ("images", ...), absolute and existing."""
    out: dict[str, list[str]] = {}
    for kind in MEDIA:
        column = spec.columns.get(kind)
        value = record.get(column) if column else None
        if not value:
            continue
        if kind != "images":
            raise DataFormatError(_("dataset {name} record {i} has {kind}: videos and audios are not supported yet; ftui trains on "
                                    "images with Qwen2-VL, Qwen2.5-VL and Qwen3-VL; drop the {kind} column").format(
                name=repr(spec.name), i=index, kind=kind))
        paths = []
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                raise DataFormatError(_("dataset {name} record {i}: an entry of {column} is not a file path: {item}").format(
                    name=repr(spec.name), i=index, column=column, item=repr(item)[:80]))
            joined = dataset_folder(spec) / item
            path = joined if joined.is_file() else Path(item).expanduser()
            if not path.is_file():
                raise DataFormatError(_("dataset {name} record {i}: the image {path} does not exist; fix the path (relative to "
                                        "dataset_dir, or absolute)").format(name=repr(spec.name), i=index, path=item))
            paths.append(str(path.resolve()))
        out[kind] = paths
    return out
