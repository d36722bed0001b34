"""Which epoch a YOLOv9 checkpoint holds, read without torch, so that only a complete one is uploaded.

YOLOv9 writes an epoch's row to results.csv *before* it saves that epoch's last.pt, and the agent
reads both while training runs: uploading last.pt as soon as the row appears could send the
previous epoch's file, or half of the new one. So the agent checks instead of guessing: a
checkpoint is a zip (torch.save's format since PyTorch 1.6) whose pickle holds ``epoch``; the agent
copies the file, checks the copy is a whole zip, and reads its epoch with an unpickler that builds
nothing (every class becomes a placeholder, every tensor's storage is skipped). The agent's own
environment has no torch, and must not import the job's code.

YOLOv9 saves ``epoch`` as the 0-based index of the epoch just finished; at the end of training it
strips the optimizer and sets ``epoch`` to -1: such a file is final, not resumable.
"""

from __future__ import annotations

import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

FINAL = -1  # strip_optimizer's epoch: a finished run's checkpoint


class _Placeholder:
    """Stands for any class or function the pickle names; accepts whatever it is given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Placeholder:
        return _Placeholder()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


class _Inert(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _Placeholder

    def persistent_load(self, pid: Any) -> Any:
        return None  # a tensor's storage: not needed to read the epoch


def checkpoint_epoch(path: str | Path) -> int | None:
    """The ``epoch`` a checkpoint file holds, or None when it is not a complete, readable checkpoint."""
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pickles) != 1:
                return None
            with z.open(pickles[0]) as f:
                doc = _Inert(f).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError):
        return None
    epoch = doc.get("epoch") if isinstance(doc, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def complete_copy(src: str | Path, into: str | Path) -> int | None:
    """Copy a checkpoint to ``into`` and return the epoch the copy holds; None (and no copy) when the file
    is missing, or not a whole, readable checkpoint (training is writing it)."""
    src, dst = Path(src), Path(into)
    if not src.is_file():
        return None
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    try:
        shutil.copyfile(src, tmp)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    held = checkpoint_epoch(tmp)
    if held is None:
        tmp.unlink(missing_ok=True)
        return None
    tmp.replace(dst)
    return held


def snapshot(last_pt: str | Path, epoch: int, into: str | Path) -> Path | None:
    """A copy of ``last_pt`` if it holds ``epoch`` (0-based) or is final; None when it does not yet.

    The copy is what gets uploaded: training may overwrite last.pt while the upload runs."""
    dst = Path(into)
    tmp = dst.with_name(dst.name + ".check")
    held = complete_copy(last_pt, tmp)
    if held is None:
        return None
    if held != epoch and held != FINAL:
        tmp.unlink(missing_ok=True)
        return None
    tmp.replace(dst)
    return dst
