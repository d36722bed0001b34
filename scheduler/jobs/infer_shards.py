"""Inference in shards: a reclaimed inference job resumes at its first unfinished shard.

YOLOv9's detect.py has no resume: a run stopped half-way leaves label files for
some images and none for the rest (images without detections get no file), so
its output cannot say where it stopped. The agent therefore splits the source
images (sorted by name, so every attempt splits them alike) into a few
contiguous shards, runs detect.py once per shard, uploads that shard's labels,
and only then reports the shard as done. The daemon keeps the count of finished
shards where a training job keeps its finished epochs (``jobs.epochs_done`` /
``epochs_total``), so the next attempt after a reclaim starts at the next shard
and a reclaim costs at most the shard in flight, not the whole job.

Shards are big enough that starting detect.py again (loading the model, about
ten seconds) stays small beside the shard's own work, and few enough that a
200,000-image job reports progress about ten times.

Pure functions: the agent does the files and the uploads.
"""

from __future__ import annotations

import math
import posixpath

from scheduler.models import JobSpec, Kind, TrainSpec

SHARD_IMAGES = 20_000  # images per shard, about
MAX_SHARDS = 20
# The image suffixes YOLOv9's LoadImages accepts (utils/dataloaders.py IMG_FORMATS).
IMAGE_SUFFIXES = frozenset({"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm"})


def shard_count(images: int) -> int:
    """How many shards an inference job over ``images`` images runs in (at least one)."""
    return max(1, min(MAX_SHARDS, math.ceil(images / SHARD_IMAGES)))


def shards_of(spec: JobSpec) -> int | None:
    """The job's shard count; None for anything but inference."""
    if spec.kind is not Kind.infer or spec.infer is None:
        return None
    return shard_count(spec.infer.images)


# Kinds whose finished work survives a reclaim: epochs (last.pt) and inference shards.
RESUMABLE_KINDS = frozenset({Kind.train, Kind.infer})


def work_units(spec: JobSpec) -> int | None:
    """Units of resumable work (``jobs.epochs_total``): epochs for training, shards for inference;
    None for kinds that run in one piece."""
    if spec.kind is Kind.infer:
        return shards_of(spec)
    if spec.kind is not Kind.train:
        return None
    return (spec.train or TrainSpec()).epochs


def shard_bounds(files: int, shards: int, index: int) -> tuple[int, int]:
    """``[start, end)`` of shard ``index`` in the sorted file list: contiguous, sizes differ by one at most."""
    if shards < 1 or not 0 <= index < shards:
        raise ValueError(f"shard {index} of {shards} does not exist")
    return index * files // shards, (index + 1) * files // shards


def is_image(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower() in IMAGE_SUFFIXES if "." in name else False


def shard_name(index: int) -> str:
    return f"shard-{index:03d}"


def shard_source_dir(workdir: str, index: int) -> str:
    """A folder of links to the shard's images: detect.py reads a folder, not a list of files."""
    return posixpath.join(workdir.rstrip("/") or "/", "shards", shard_name(index))


def output_uri(spec: JobSpec) -> str:
    """Where the labels of every finished shard are collected: ``infer.output``, or by default
    ``runs/<job name>/`` at the top of the source's bucket (outside the source folder, so a
    later inference over that folder does not pick them up)."""
    if spec.infer is None:
        raise ValueError("output_uri needs an infer job")
    if spec.infer.output:
        return spec.infer.output.rstrip("/") + "/"
    scheme, rest = spec.infer.source.split("://", 1)
    bucket = rest.split("/", 1)[0]
    return f"{scheme}://{bucket}/runs/{spec.name}/"
