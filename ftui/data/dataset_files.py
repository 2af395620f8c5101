"""Reading a dataset's records from its files: json, jsonl (a preview reads only its head),
parquet, txt (one document per line, as LLaMA-Factory's text loader), or a folder of them. A
hub dataset is left to the runner (``HubDataset``: ``datasets`` is heavy and networked). json and
jsonl are read with the standard library rather than ``datasets`` so that a bad record can be
shown with its line number, and nothing is cached under ~/.cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json  # json.loads, a too-deep document a ValueError
from ftui.i18n import _
from ftui.data.records import DataFormatError, DatasetSpec, _snippet

TEXT_PREVIEW_BYTES = 1 << 20  # a preview (read_records with a limit) reads at most this much of a .txt
DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".txt")


def read_records(spec: DatasetSpec, limit: int | None = None) -> list[dict[str, Any]]:
    """Records of one dataset as dicts (json, jsonl, parquet, or a hub dataset); ``limit``
    reads only the first few where the format allows (a preview of a huge jsonl)."""
    if spec.file_name:
        records = _read_file(Path(spec.file_name), limit)
        return records if limit is None else records[:limit]
    raise HubDataset(spec.hf_hub_url or spec.name)


class HubDataset(LookupError):
    """A hub dataset: the runner loads it with `datasets` (heavy, networked), the form does not."""


def _read_file(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    # json / jsonl are read with the standard library rather than `datasets` so that a bad
    # record can be shown with its line number, and nothing is cached under ~/.cache.
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in DATA_SUFFIXES)
        return [r for f in files for r in _read_file(f, limit)]
    if not path.exists():
        raise DataFormatError(_("dataset file {path} does not exist").format(path=path))
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return _read_text_lines(path, limit)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if limit is not None and suffix == ".jsonl":
        return _read_jsonl_head(path, limit)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(_("{path} is not UTF-8 text (byte {byte}); save it as UTF-8").format(path=path, byte=err.start)) from None
    if not text.strip():
        raise DataFormatError(_("{path} is empty; it needs a list of records").format(path=path))
    if suffix == ".jsonl" or (suffix != ".json" and not text.lstrip().startswith("[")):
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(load_json(line))
                except ValueError as err:
                    raise _not_json(path, n, err, line) from None
        return records
    try:
        data = load_json(text)
    except ValueError as err:
        raise DataFormatError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataFormatError(_("{path} must hold a JSON list of records").format(path=path))
    return data


def _read_jsonl_head(path: Path, limit: int) -> list[dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    records.append(load_json(line))
                except ValueError as err:
                    raise _not_json(path, n, err, line) from None
            if len(records) >= limit:
                break
    if not records:
        raise DataFormatError(_("{path} is empty; it needs a list of records").format(path=path))
    return records


def _not_json(path: Path, n: int, err: ValueError, line: str) -> DataFormatError:
    return DataFormatError(_("{path} line {n} is not JSON ({error}): {line}").format(path=path, n=n, error=err, line=_snippet(line)))


def _read_text_lines(path: Path, limit: int | None = None) -> list[dict[str, str]]:
    """A .txt file as LLaMA-Factory loads it (`datasets`' text loader): one ``{"text": line}``
    record per line, \\n, \\r\\n and a lone \\r all ending a line, only the line ending
    removed, blank lines kept (as empty documents: LLaMA-Factory trains them as a lone EOS).
    Other characters str.splitlines() would split on (\\u2028, \\x0c, ...) stay inside the line.
    A preview (``limit``) reads at most TEXT_PREVIEW_BYTES, so a huge file opens at once."""
    with open(path, "rb") as fh:
        data = fh.read() if limit is None else fh.read(TEXT_PREVIEW_BYTES + 1)
    clipped = limit is not None and len(data) > TEXT_PREVIEW_BYTES
    if clipped:  # whole lines only, where the first MiB holds a line ending
        data = data[:TEXT_PREVIEW_BYTES]
        data = data[: data.rfind(b"\n") + 1] or data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if not (clipped and err.reason == "unexpected end of data"):  # not merely a character cut by the preview
            line = data.count(b"\n", 0, err.start) + 1
            raise DataFormatError(_("{path} is not UTF-8 text (byte {byte}, line {line}); save it as UTF-8").format(
                path=path, byte=err.start, line=line)) from None
        text = data[: err.start].decode("utf-8")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the file's last line ending does not start another document
    if not lines:
        raise DataFormatError(_("{path} is empty; it needs one document per line").format(path=path))
    return [{"text": line} for line in (lines if limit is None else lines[:limit])]
