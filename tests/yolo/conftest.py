"""The YOLOv9 tier: the official scripts run for real on CPU (minutes, a 6 GB Python). ``scripts/test-yolo``.

The main suite collects these tests and skips them, saying why; ``scripts/test-yolo`` sets
GPUSCHED_YOLO_TIER=1 and GPUSCHED_YOLO_PYTHON (the job image's Python, .venv-yolo). Under the tier a
missing YOLOv9 checkout or Python is a failure, never a skip.

The YOLOv9 checkout: $GPUSCHED_YOLOV9_DIR, else ``../shared/vendor/yolov9`` beside the repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.yolo.cloud import Cloud, Image
from tests.yolo.dataset import find_truetype_font, write_dataset, yolo_environment

TIER = os.environ.get("GPUSCHED_YOLO_TIER") == "1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SKIP_REASON = ("YOLOv9 tier: runs the real YOLOv9 scripts on CPU (minutes); run scripts/test-yolo, "
               "which sets GPUSCHED_YOLO_TIER=1")
_WALL_TIMES = pytest.StashKey[list[tuple[str, float]]]()
_MEASURES = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TIER:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    times = config.stash.get(_WALL_TIMES, [])
    if times:
        terminalreporter.section("YOLOv9 scripts, wall time")
        for label, seconds in times:
            terminalreporter.write_line(f"{seconds:7.1f} s  {label}")
        terminalreporter.write_line(f"{sum(s for _, s in times):7.1f} s  in all")
    measures = config.stash.get(_MEASURES, [])
    if measures:
        terminalreporter.section("YOLOv9 tier, measured")
        for line in measures:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def wall_times(pytestconfig: pytest.Config) -> list[tuple[str, float]]:
    """Append (what, seconds): printed at the end of the run."""
    return pytestconfig.stash.setdefault(_WALL_TIMES, [])


@pytest.fixture(scope="session")
def measures(pytestconfig: pytest.Config) -> list[str]:
    """Append a line of something measured (not a time): printed at the end of the run."""
    return pytestconfig.stash.setdefault(_MEASURES, [])


@pytest.fixture(scope="session")
def yolov9_dir() -> Path:
    named = os.environ.get("GPUSCHED_YOLOV9_DIR")
    path = Path(named) if named else REPO.parent / "shared" / "vendor" / "yolov9"
    if not (path / "train_dual.py").is_file():
        where = f"GPUSCHED_YOLOV9_DIR={named}" if named else f"{path} (GPUSCHED_YOLOV9_DIR is not set)"
        pytest.fail(f"no YOLOv9 checkout at {where}: train_dual.py is missing", pytrace=False)
    return path.resolve()


@pytest.fixture(scope="session")
def yolo_python() -> str:
    """The job image's Python. Not resolved: a venv's python is a symlink out of the venv."""
    named = os.environ.get("GPUSCHED_YOLO_PYTHON")
    if not named:
        pytest.fail("GPUSCHED_YOLO_PYTHON is not set: run the tier with scripts/test-yolo", pytrace=False)
    path = os.path.abspath(named)  # the scripts run in the YOLOv9 checkout: a relative path would break
    if not os.access(path, os.X_OK):
        pytest.fail(f"GPUSCHED_YOLO_PYTHON={named} is not an executable", pytrace=False)
    return path


@pytest.fixture(scope="session")
def yolo_env(tmp_path_factory: pytest.TempPathFactory, yolo_python: str) -> dict[str, str]:
    return yolo_environment(tmp_path_factory.mktemp("yolo-config"), yolo_python=yolo_python)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A job's work directory as scheduler.jobs.yolo lays it out, with the dataset staged in data/.

    The dataset is written with ``path:`` set to its absolute folder. YOLOv9 resolves a relative or
    missing ``path:`` against its own checkout, so a user's data.yaml staged as it is into <workdir>/data/
    does not work (test_a_relative_data_yaml_resolves_against_the_checkout); the agent rewrites ``path:``
    when it stages a dataset, and test_agent_on_yolov9.py stages a user's file through that code.
    """
    root = tmp_path_factory.mktemp("job")
    write_dataset(root / "data", root=True)
    return str(root)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory, yolov9_dir: Path, yolo_python: str) -> Iterator[Cloud]:
    """The module's daemon, bucket (with the 12-image dataset) and metadata service; its machines stop after."""
    image = Image(yolov9_dir=yolov9_dir, python=yolo_python, font=find_truetype_font(yolo_python))
    c = Cloud(tmp_path_factory.mktemp("cloud"), image)
    try:
        yield c
    finally:
        c.close()
