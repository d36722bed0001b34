"""Spot availability traces of "Can't Be Late" (Wu et al., NSDI 2024), read from a folder.

The traces are public (skypilot-org/spot-traces) but carry no licence, so they
never enter this repository: the benchmark takes their folder as an argument and
this module says how to fetch them when the folder is missing.

Layout: ``<kind>/<N>-node/<collection>/<zone>_<gpu>_<count>.json`` where kind is
``availability`` or ``preemption``; each file is
``{"metadata": {"gap_seconds": G}, "data": [n0, n1, ...], "prices"?: [...]}`` with
``n`` the number of spot instances available at that tick. An N-node gang job sees
spot only when ``n >= N``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.errors import UserError

TRACES_ORIGIN = "https://github.com/skypilot-org/spot-traces"
TRACES_COMMIT = "221da1a"
FETCH_HINT = (
    f"git clone {TRACES_ORIGIN} spot-traces && git -C spot-traces checkout {TRACES_COMMIT}, "
    "then pass that folder (or its availability/ or preemption/ subfolder)"
)

_NODES_RE = re.compile(r"^(\d+)-node$")
_NAME_RE = re.compile(r"^(?P<zone>[a-z0-9-]+)_(?P<gpu>[a-z0-9]+)_(?P<count>\d+)$")


@dataclass(frozen=True)
class SpotTrace:
    """One trace: how many spot instances were obtainable at each tick of ``gap_s`` seconds."""

    name: str  # path under the traces folder, without .json
    kind: str  # "availability" | "preemption"
    nodes: int  # N of the N-node folder: a gang job of N instances
    collection: str  # e.g. "aws-10-26-2022"
    zone: str
    gpu: str
    gpus_per_instance: int
    gap_s: float
    counts: np.ndarray  # int, one per tick
    prices: np.ndarray | None  # spot price per tick where the file carries it

    @property
    def group(self) -> str:
        """The folder the trace came from: ``availability/1-node/aws-10-26-2022``."""
        return f"{self.kind}/{self.nodes}-node/{self.collection}"

    @property
    def hours(self) -> float:
        return len(self.counts) * self.gap_s / 3600

    def available(self) -> np.ndarray:
        """Bool per tick: spot usable by the whole gang (all N instances at once)."""
        return self.counts >= self.nodes

    def availability_share(self) -> float:
        return float(self.available().mean()) if len(self.counts) else 0.0

    def mean_spot_price(self) -> float | None:
        if self.prices is None:
            return None
        known = self.prices[np.isfinite(self.prices)]
        return float(known.mean()) if len(known) else None


def load_traces(folder: Path) -> list[SpotTrace]:
    """Every trace file under ``folder``, sorted by name; UserError when there are none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"spot trace folder {folder} does not exist", fix=FETCH_HINT)
    files = sorted(p for p in folder.rglob("*.json") if p.is_file())
    if not files:
        raise UserError(f"no trace files (*.json) under {folder}", fix=FETCH_HINT)
    return [load_trace(path, folder) for path in files]


def load_trace(path: Path, root: Path) -> SpotTrace:
    """One trace file; its kind, node count and collection come from the folders above it."""
    rel = path.relative_to(root)
    parts = _path_parts(path)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        gap_s = float(body["metadata"]["gap_seconds"])
        counts = np.asarray(body["data"], dtype=np.int64)
        raw_prices = body.get("prices")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{rel}: not a spot trace ({type(exc).__name__}: {exc})",
            fix='each file must be {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}',
        ) from None
    if gap_s <= 0 or counts.ndim != 1 or len(counts) == 0:
        raise UserError(f"{rel}: gap_seconds must be positive and data a non-empty list of counts")
    prices = None
    if raw_prices is not None:
        prices = np.array([math.nan if p is None else float(p) for p in raw_prices], dtype=float)
        if len(prices) != len(counts):
            raise UserError(f"{rel}: {len(prices)} prices for {len(counts)} ticks")
    kind, nodes, collection, zone, gpu, per_instance = parts
    return SpotTrace(
        name=str(rel.with_suffix("")).replace("\\", "/"),
        kind=kind,
        nodes=nodes,
        collection=collection,
        zone=zone,
        gpu=gpu,
        gpus_per_instance=per_instance,
        gap_s=gap_s,
        counts=counts,
        prices=prices,
    )


def _path_parts(path: Path) -> tuple[str, int, str, str, str, int]:
    """(kind, nodes, collection, zone, gpu, gpus per instance) from the file's path.

    Files outside the published layout still load as single-node traces so a
    hand-made trace works; the name supplies what it can.
    """
    collection = path.parent.name
    node_dir = path.parent.parent.name
    kind = path.parent.parent.parent.name or "availability"
    m = _NODES_RE.match(node_dir)
    nodes = int(m.group(1)) if m else 1
    if not m:
        kind = "availability"
    n = _NAME_RE.match(path.stem)
    if n:
        return kind, nodes, collection, n["zone"], n["gpu"], int(n["count"])
    return kind, nodes, collection, path.stem, "", 1


def resample(available: np.ndarray, gap_s: float, max_tick_s: float) -> tuple[np.ndarray, float]:
    """Bring a trace to a tick of at most ``max_tick_s`` seconds: (availability, tick seconds).

    Coarse ticks are split (each sample holds for its whole gap, as the probe saw
    it); fine ticks are merged, a merged tick counting as available only when every
    sample in it was, so a preemption inside the tick is never hidden.
    """
    if gap_s > max_tick_s:
        split = math.ceil(gap_s / max_tick_s)
        return np.repeat(available, split), gap_s / split
    merge = max(1, math.floor(max_tick_s / gap_s))
    if merge == 1:
        return available.copy(), gap_s
    whole = len(available) // merge
    blocks = available[: whole * merge].reshape(whole, merge)
    return blocks.all(axis=1), gap_s * merge


def spells(available: np.ndarray, tick_h: float) -> tuple[np.ndarray, np.ndarray]:
    """Lengths in hours of the available spells and of the outages, in order of occurrence."""
    if len(available) == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.flatnonzero(np.diff(available.astype(np.int8))) + 1
    bounds = np.concatenate(([0], edges, [len(available)]))
    lengths = np.diff(bounds) * tick_h
    first_up = bool(available[0])
    up = lengths[0 if first_up else 1 :: 2]
    down = lengths[1 if first_up else 0 :: 2]
    return up, down
