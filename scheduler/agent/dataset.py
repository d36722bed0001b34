"""The job's dataset on the instance: its folder staged, its data.yaml pointed at the local copy.

A job's ``data.uri`` is a folder holding ``data.yaml`` and the images and labels it names.
The staged folder *is* the dataset's root, so whatever ``path:`` said where the yaml was
written (relative, absolute such as ``/datasets/coco``, or missing) becomes the local folder.
YOLOv9 joins ``train:``/``val:``/``test:`` (a string or a list) onto ``path``; here each
entry is written relative to it, and must stay inside it. ``names``, ``nc`` and every other
key are left as they were (comments are not kept: the file is parsed and dumped again).
Errors are ``UserError``: the data.yaml is the user's to correct.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

import yaml

from scheduler.agent.storage.base import ObjectStore
from scheduler.errors import UserError

__all__ = ["DATA_YAML", "SPLITS", "localize_data_yaml", "stage_dataset"]

DATA_YAML = "data.yaml"
SPLITS = ("train", "val", "test")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_FIX = "write train/val/test relative to the dataset folder (the folder that holds data.yaml)"


def localize_data_yaml(text: str, local_dir: str) -> str:
    """A data.yaml whose ``path:`` is ``local_dir`` (absolute) and whose splits resolve inside it.

    A relative entry stays relative (``../`` that would leave the folder is refused); an
    absolute entry under the old absolute ``path:`` is rebased onto the new one; an entry
    that is a URL, a path on another host (``//host/share``) or any other absolute path is
    refused, naming the split.
    """
    if not posixpath.isabs(local_dir):
        raise ValueError(f"local_dir must be absolute, not {local_dir!r}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{DATA_YAML} is not valid YAML: {exc}", fix="check it with a YAML linter") from None
    if not isinstance(data, dict):
        raise UserError(f"{DATA_YAML} must be a mapping with train/val (and names), not {type(data).__name__}",
                        fix="see YOLOv9's data/coco.yaml for the layout")
    old_root = data.get("path")
    old_root = old_root if isinstance(old_root, str) and old_root.strip() else None
    out: dict[str, Any] = {"path": posixpath.normpath(local_dir)}
    for key, value in data.items():
        if key == "path":
            continue
        if key in SPLITS and value not in (None, ""):
            if isinstance(value, list):
                value = [_localize_entry(key, item, old_root) for item in value]
            else:
                value = _localize_entry(key, value, old_root)
        out[key] = value
    return yaml.safe_dump(out, sort_keys=False, allow_unicode=True)


def _localize_entry(split: str, entry: Any, old_root: str | None) -> str:
    if not isinstance(entry, str) or not entry.strip():
        raise UserError(f"{DATA_YAML}: {split}: {entry!r} is not a path", fix=_FIX)
    entry = entry.strip()
    if _URL.match(entry):
        raise UserError(f"{DATA_YAML}: {split}: {entry!r} is a URL; the dataset must be in the staged folder",
                        fix=_FIX)
    if entry.startswith(("//", "\\\\")):
        raise UserError(f"{DATA_YAML}: {split}: {entry!r} is a path on another host", fix=_FIX)
    if _WINDOWS_DRIVE.match(entry):
        raise UserError(f"{DATA_YAML}: {split}: {entry!r} is an absolute path on another machine", fix=_FIX)
    if posixpath.isabs(entry):
        root = posixpath.normpath(old_root) if old_root and posixpath.isabs(old_root) else None
        norm = posixpath.normpath(entry)
        if root is None or not (norm == root or norm.startswith(root.rstrip("/") + "/")):
            raise UserError(f"{DATA_YAML}: {split}: {entry!r} is an absolute path outside the dataset's path "
                            f"({old_root or 'none given'})", fix=_FIX)
        return posixpath.relpath(norm, root)
    rel = posixpath.normpath(entry)
    if rel == ".." or rel.startswith("../"):
        raise UserError(f"{DATA_YAML}: {split}: {entry!r} leaves the dataset folder", fix=_FIX)
    return rel


def stage_dataset(store: ObjectStore, data_uri: str, local_dir: str | Path) -> Path:
    """Download the dataset folder at ``data_uri`` into ``local_dir`` and localize its data.yaml; returns its path."""
    root = Path(local_dir).resolve()
    store.download_tree(data_uri, root)
    data_yaml = root / DATA_YAML
    if not data_yaml.is_file():
        raise UserError(f"{data_uri} holds no {DATA_YAML} at its top",
                        fix=f"put {DATA_YAML} in the folder data.uri names")
    data_yaml.write_text(localize_data_yaml(data_yaml.read_text(encoding="utf-8"), str(root)), encoding="utf-8")
    return data_yaml
