"""The tier's own footing, checked on CPU: the job image's Python has every package the tier installs (a missing
one fails here, by name, rather than deep in a YOLOv9 log), and the parts of the GPU run that need no GPU
(``gpu.py``, ``scripts/test-yolo --gpu`` without its wheels)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.yolo.conftest import REPO
from tests.yolo.gpu import capped_python, epoch_seconds, offer_for

# requirements-image.txt's names -> what the scripts import.
IMPORT_NAMES = {"torch": "torch", "torchvision": "torchvision", "numpy": "numpy", "opencv-python-headless": "cv2",
                "PyYAML": "yaml", "tqdm": "tqdm", "pandas": "pandas", "matplotlib": "matplotlib",
                "seaborn": "seaborn", "scipy": "scipy", "psutil": "psutil", "thop": "thop", "pillow": "PIL",
                "requests": "requests", "ipython": "IPython", "GitPython": "git", "tensorboard": "tensorboard",
                "setuptools": "pkg_resources", "onnx": "onnx", "onnxscript": "onnxscript"}


def requirement_names(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.split(r"[=<>!~\[ ]", line, maxsplit=1)[0])
    return names


def test_the_image_python_has_every_package(yolo_python: str, yolo_env: dict[str, str]) -> None:
    names = requirement_names(REPO / "tests" / "yolo" / "requirements-image.txt")
    unknown = [n for n in names if n not in IMPORT_NAMES]
    assert not unknown, f"say what {unknown} is imported as in IMPORT_NAMES"
    code = ("import importlib, json, sys\nmissing = {}\nfor module in sys.argv[1:]:\n    try:\n"
            "        importlib.import_module(module)\n    except Exception as exc:\n"
            "        missing[module] = f'{type(exc).__name__}: {exc}'\nprint(json.dumps(missing))")
    out = subprocess.run([yolo_python, "-c", code, *(IMPORT_NAMES[n] for n in names)], env=yolo_env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    missing = json.loads(out.stdout.strip().splitlines()[-1])
    assert missing == {}, f"the job image's Python ({yolo_python}) cannot import: {missing}"


def test_an_unknown_gpu_is_offered_as_the_known_one_closest_in_memory() -> None:
    assert offer_for("L4", 23034) == "L4"  # known: as the driver names it
    assert offer_for(None, 143771) == "A100-80G"  # an H200 (141 GB): an 80 GB GPU
    assert offer_for(None, 46068) == "L20"  # a 48 GB card


def test_epoch_times_are_read_off_the_progress_samples() -> None:
    samples = [(0.0, 0), (1.0, 0), (5.0, 1), (6.0, 1), (9.0, 1), (11.0, 3)]
    assert epoch_seconds(samples) == [5.0, 3.0, 3.0]
    assert epoch_seconds([]) == []


def test_the_capped_python_runs_a_script_as_python_would(tmp_path: Path, yolo_python: str,
                                                        yolo_env: dict[str, str]) -> None:
    probe = tmp_path / "scripts" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("import json, sys\nprint(json.dumps([__name__, __file__, sys.argv, sys.path[0]]))\n")
    python = capped_python(tmp_path / "python", yolo_python, tmp_path / "capped-once", 1 << 30)
    first = subprocess.run([python, "scripts/probe.py", "--batch", "8"], cwd=tmp_path, env=yolo_env,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    name, file, argv, path0 = json.loads(first.stdout.splitlines()[-1])
    assert (name, file, argv, path0) == ("__main__", str(probe), [str(probe), "--batch", "8"], str(probe.parent))
    assert "capped-python: no CUDA device, nothing capped" in first.stderr  # this CPU machine
    second = subprocess.run([python, "scripts/probe.py"], cwd=tmp_path, env=yolo_env, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0 and "capped-python" not in second.stderr  # only the first run is capped


def test_the_gpu_run_without_its_wheels_says_how_to_get_them(tmp_path: Path) -> None:
    env = {**os.environ, "GPUSCHED_YOLO_GPU_WHEELS": str(tmp_path / "no-wheels")}
    out = subprocess.run([str(REPO / "scripts" / "test-yolo"), "--gpu"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"no wheels in {tmp_path / 'no-wheels'}" in out.stderr and "pip download" in out.stderr
