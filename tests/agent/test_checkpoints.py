"""A checkpoint's epoch is read from the file itself, without torch; half-written files are refused.

The files here are built the way torch.save lays them out (a zip holding ``<name>/data.pkl`` and the
tensors' storages, the pickle naming the job's classes and torch's rebuild functions), from classes
that exist only while the file is written, as YOLOv9's do on the agent's side. The real YOLOv9 tier
(tests/yolo) reads real last.pt files.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from scheduler.agent.checkpoints import FINAL, checkpoint_epoch, snapshot


def _torch_like(path: Path, epoch: int) -> Path:
    """A file shaped like YOLOv9's last.pt: {'epoch', 'best_fitness', 'model', 'optimizer', ...}."""
    models = types.ModuleType("models.yolo")

    class DetectionModel:  # stands for YOLOv9's model class, which the agent must not import
        def __init__(self) -> None:
            self.yaml = {"nc": 1}
            self.state = OrderedDict(w=Storage())

    class Storage:  # stands for a tensor storage, saved by reference like torch's
        pass

    DetectionModel.__module__ = Storage.__module__ = "models.yolo"
    DetectionModel.__qualname__, Storage.__qualname__ = "DetectionModel", "Storage"
    models.DetectionModel, models.Storage = DetectionModel, Storage
    package = types.ModuleType("models")
    package.yolo = models
    saved = {name: sys.modules.get(name) for name in ("models", "models.yolo")}
    sys.modules["models"], sys.modules["models.yolo"] = package, models
    try:
        buf = io.BytesIO()

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj: object) -> object:
                return ("storage", "0", "cpu", 4) if isinstance(obj, Storage) else None

        Pickler(buf, protocol=2).dump({"epoch": epoch, "best_fitness": 0.5, "model": DetectionModel(),
                                       "optimizer": {"state": {}}, "date": "2026-12-04"})
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("last/data.pkl", buf.getvalue())
        z.writestr("last/data/0", b"\0" * 16)
        z.writestr("last/version", "3\n")
    return path


def test_the_epoch_is_read_without_the_job_code(tmp_path):
    assert checkpoint_epoch(_torch_like(tmp_path / "last.pt", 7)) == 7
    assert checkpoint_epoch(_torch_like(tmp_path / "final.pt", FINAL)) == FINAL


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 half a zip", b"not a checkpoint at all"])
def test_a_torn_or_foreign_file_has_no_epoch(tmp_path, content):
    path = tmp_path / "last.pt"
    path.write_bytes(content)
    assert checkpoint_epoch(path) is None
    assert checkpoint_epoch(tmp_path / "missing.pt") is None


def test_a_checkpoint_cut_short_mid_write_has_no_epoch(tmp_path):
    whole = _torch_like(tmp_path / "last.pt", 3).read_bytes()
    torn = tmp_path / "torn.pt"
    torn.write_bytes(whole[: len(whole) // 2])
    assert checkpoint_epoch(torn) is None


def test_a_snapshot_is_taken_only_of_the_epoch_asked_for(tmp_path):
    (tmp_path / "run").mkdir()
    last = _torch_like(tmp_path / "run" / "last.pt", 4)
    into = tmp_path / "upload" / "last.pt"
    assert snapshot(last, 5, into) is None and not into.exists()  # still epoch 4's file: wait
    assert not list((tmp_path / "upload").glob("*.partial"))
    assert snapshot(last, 4, into) == into and checkpoint_epoch(into) == 4
    _torch_like(last, FINAL)
    assert snapshot(last, 9, into) == into and checkpoint_epoch(into) == FINAL  # a finished run's file
    assert snapshot(tmp_path / "nothing.pt", 1, tmp_path / "x.pt") is None
