"""A tiny YOLO dataset made on the spot, and the environment the real YOLOv9 scripts need to run offline.

``write_dataset`` draws 8 training and 4 validation images (128 px, one class: filled rectangles on a
noisy background) with their YOLO label files and a data.yaml, the same bytes for the same arguments.
data.yaml names its splits by paths relative to the dataset folder, as a dataset uploaded to a bucket
would. YOLOv9 resolves a relative ``path:`` (or a missing one) against its own checkout, not against the
yaml file (``utils/general.py:check_dataset``), so ``root`` writes the folder's absolute path as ``path:``
for a run; without it the file is what a user uploads.

``yolo_environment`` is what the scripts need besides the command line: a TrueType font named
Arial.ttf (Arial.Unicode.ttf for non-ASCII class names) in ``$YOLOV5_CONFIG_DIR``, else
``check_dataset`` downloads one; the pre-2.6 ``torch.load`` (YOLOv9's own checkpoints fail
``weights_only``); and no pip installs at run time (``check_requirements``).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

from PIL import Image, ImageDraw

__all__ = ["CLASS_NAME", "write_dataset", "find_truetype_font", "yolo_environment"]

CLASS_NAME = "box"
# The names YOLOv9 looks for in its config folder: Arial.Unicode.ttf when a class name is not ASCII
# (utils/general.py:check_dataset, utils/plots.py:Annotator).
FONT_NAMES = ("Arial.ttf", "Arial.Unicode.ttf")


def write_dataset(folder: Path, *, train: int = 8, val: int = 4, size: int = 128, seed: int = 0,
                  root: bool = False) -> Path:
    """Write ``images/{train,val}/*.png``, ``labels/{train,val}/*.txt`` and ``data.yaml`` into ``folder``.

    Returns the data.yaml path. ``root``: add ``path: <folder, absolute>`` so that YOLOv9 finds the splits.
    """
    folder = Path(folder)
    rng = random.Random(seed)
    for split, count in (("train", train), ("val", val)):
        images, labels = folder / "images" / split, folder / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            image, boxes = _draw(rng, size)
            stem = f"{split}_{i:03d}"
            image.save(images / f"{stem}.png", optimize=False)
            (labels / f"{stem}.txt").write_text("".join(f"0 {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}\n"
                                                        for cx, cy, w, h in boxes))
    lines = [f"path: {folder.resolve().as_posix()}"] if root else []
    lines += ["train: images/train", "val: images/val", "nc: 1", f"names: ['{CLASS_NAME}']"]
    data_yaml = folder / "data.yaml"
    data_yaml.write_text("\n".join(lines) + "\n")
    return data_yaml


def _draw(rng: random.Random, size: int) -> tuple[Image.Image, list[tuple[float, float, float, float]]]:
    """One image: a grey, speckled background and 1 to 3 filled rectangles that do not overlap much."""
    base = rng.randint(90, 150)
    image = Image.new("RGB", (size, size), (base, base, base))
    draw = ImageDraw.Draw(image)
    for _ in range(size * 2):  # speckles, so that the background is not a single colour
        x, y = rng.randrange(size), rng.randrange(size)
        shade = base + rng.randint(-40, 40)
        draw.point((x, y), fill=(shade, shade, shade))
    boxes: list[tuple[float, float, float, float]] = []
    placed: list[tuple[int, int, int, int]] = []
    for _ in range(rng.randint(1, 3)):
        for _attempt in range(20):
            w, h = rng.randint(size // 6, size // 2), rng.randint(size // 6, size // 2)
            x0, y0 = rng.randint(0, size - w), rng.randint(0, size - h)
            x1, y1 = x0 + w, y0 + h
            if all(x1 <= a or x0 >= c or y1 <= b or y0 >= d for a, b, c, d in placed):
                break
        else:
            continue
        placed.append((x0, y0, x1, y1))
        colour = (rng.randint(0, 255), rng.randint(0, 60), rng.randint(120, 255))
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=colour, outline=(0, 0, 0))
        boxes.append(((x0 + x1) / 2 / size, (y0 + y1) / 2 / size, w / size, h / size))
    return image, boxes


# --- the scripts' environment ---------------------------------------------------------------------


def find_truetype_font(yolo_python: str | None = None) -> Path:
    """A TrueType font on this machine: matplotlib's DejaVuSans (this interpreter's, then the job
    Python's), else any .ttf in the usual system folders. Fails when there is none."""
    candidates: list[Path] = []
    try:
        import matplotlib

        candidates.append(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf")
    except ImportError:
        pass
    if yolo_python:
        prefix = Path(yolo_python).parent.parent  # <venv>/bin/python -> <venv>
        candidates += sorted(prefix.glob("lib/python3*/site-packages/matplotlib/mpl-data/fonts/ttf/DejaVuSans.ttf"))
    for folder in (Path(sys.prefix) / "share" / "fonts", Path("/usr/share/fonts"), Path("/usr/local/share/fonts")):
        if folder.is_dir():
            candidates += sorted(folder.rglob("*.ttf"))
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError("no TrueType font found (matplotlib's DejaVuSans.ttf or /usr/share/fonts/**/*.ttf); "
                            "YOLOv9 would try to download Arial.ttf, which needs the internet")


def yolo_environment(config_dir: Path, *, yolo_python: str | None = None,
                     base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to run YOLOv9's scripts in, offline: ``base`` (default: this process's) plus
    YOLOV5_CONFIG_DIR=``config_dir`` holding a font as Arial.ttf and Arial.Unicode.ttf (the glyphs of
    non-Latin class names will be missing from plots), TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1,
    and YOLOv5_AUTOINSTALL=false (a missing optional package is reported, never pip-installed)."""
    config_dir = Path(config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)  # YOLOv9 makes it without parents
    missing = [config_dir / name for name in FONT_NAMES if not (config_dir / name).is_file()]
    if missing:
        font = find_truetype_font(yolo_python)
        for path in missing:
            shutil.copyfile(font, path)
    env = dict(os.environ if base is None else base)
    env.update({
        "YOLOV5_CONFIG_DIR": str(config_dir),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
        "YOLOv5_AUTOINSTALL": "false",
        "PYTHONUNBUFFERED": "1",  # the log shows each epoch as it ends
        "MPLBACKEND": "Agg",
    })
    return env
