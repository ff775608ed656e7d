"""Finding segment files in host data directories and cutting them into read units.

A host data directory holds ``host.json`` (``{"node": ...}``) and
``queues/<queue>/<partition>/NNNNNNNNNNNNNNNNNNNN.seg`` or, with one log
stream per origin host, ``queues/<queue>/<partition>/<origin>/NNNNNNNNNNNNNNNNNNNN.seg``
(each stream has its own seq space; the ``origin`` column names it, "" in
the flat layout). A path given to the
reader may be one host directory, or a directory whose children (at any depth
up to ``MAX_DEPTH``) are host directories — e.g. a LocalCluster's ``data/``.

A read unit is one segment file, or a block range of one when the file is
larger than ``split_bytes`` (split points are found by walking block headers).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from analytics.segments import block_offsets, file_size

MAX_DEPTH = 3
DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class ReadUnit:
    """A byte range ``[start, end)`` of one segment file (end=None: to the end)."""

    host: str
    queue: str
    partition: int
    origin: str
    path: str
    start: int = 0
    end: int | None = None
    next_seq: int | None = None
    """The first seq of the stream's next segment file (its name), on the unit
    that reads a file to its end (``end`` None): the reader reports a gap
    between the two (:func:`analytics.segments.missing`)."""


def host_name(host_dir: Path) -> str:
    try:
        node = json.loads((host_dir / "host.json").read_text()).get("node")
    except (OSError, ValueError, AttributeError):
        node = None
    return node if isinstance(node, str) and node else host_dir.name


def find_host_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Host data directories under the given paths, sorted and deduplicated."""
    found: set[Path] = set()

    def walk(p: Path, depth: int) -> None:
        if (p / "queues").is_dir():
            found.add(p.resolve())
            return
        if depth >= MAX_DEPTH or not p.is_dir():
            return
        for child in sorted(p.iterdir()):
            if child.is_dir():
                walk(child, depth + 1)

    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"no such data directory: {p}")
        walk(p, 0)
    return sorted(found)


def _listing(directory: Path) -> list[Path]:
    """A directory's entries, sorted; none when it is gone (a running host deleted
    a queue, or moved a stream's copy to its trash, while the job listed it)."""
    try:
        return sorted(directory.iterdir())
    except FileNotFoundError:
        return []


def segment_files(host_dir: Path) -> Iterable[tuple[str, int, str, Path]]:
    """(queue, partition, origin, path) of every segment file of a host, in seq order per stream."""
    qroot = host_dir / "queues"
    for qdir in _listing(qroot):
        if not qdir.is_dir():
            continue
        for pdir in _listing(qdir):
            if not (pdir.is_dir() and pdir.name.isascii() and pdir.name.isdigit()):  # ("²" is a digit)
                continue
            for seg in sorted(pdir.glob("*.seg")):
                if seg.is_file():
                    yield qdir.name, int(pdir.name), "", seg
            for odir in _listing(pdir):
                if odir.is_dir() and not odir.name.endswith(".seg"):
                    for seg in sorted(odir.glob("*.seg")):
                        if seg.is_file():
                            yield qdir.name, int(pdir.name), odir.name, seg


def host_names(host_dirs: list[Path]) -> dict[Path, str]:
    """Each host directory's ``host`` column: its node name, or, when several
    directories claim one node (a live directory beside a copy of it, two
    snapshots), ``node@<directory>``: each is then a replica of its own,
    which ``one_replica`` counts once, where a shared name counted both."""
    names = {d: host_name(d) for d in host_dirs}
    shared = {n for n, k in Counter(names.values()).items() if k > 1}
    return {d: f"{n}@{d}" if n in shared else n for d, n in names.items()}


def plan_units(paths: Iterable[str | Path], split_bytes: int = DEFAULT_SPLIT_BYTES,
               queues: set[str] | None = None) -> list[ReadUnit]:
    """Every read unit under ``paths`` (optionally only the named queues)."""
    units: list[ReadUnit] = []
    host_dirs = find_host_dirs(paths)
    names = host_names(host_dirs)
    for host_dir in host_dirs:
        host = names[host_dir]
        files = [f for f in segment_files(host_dir) if queues is None or f[0] in queues]
        for i, (queue, part, origin, seg) in enumerate(files):
            cut = _split(host, queue, part, origin, seg, split_bytes)
            after = files[i + 1] if i + 1 < len(files) else None
            if cut and after is not None and after[:3] == (queue, part, origin):
                cut[-1] = replace(cut[-1], next_seq=_base_seq(after[3]))
            units.extend(cut)
    return units


def _base_seq(seg: Path) -> int | None:
    """A segment file's first seq, from its name (None: not a seq)."""
    stem = seg.name.removesuffix(".seg")
    return int(stem) if stem.isascii() and stem.isdigit() else None


def _split(host: str, queue: str, part: int, origin: str, seg: Path, split_bytes: int) -> list[ReadUnit]:
    """The file as ``ceil(size / split_bytes)`` block ranges of about equal size (a range
    starts on the first block at or past its share), or whole when it fits."""
    size = file_size(seg)
    parts = -(-size // split_bytes)
    if parts <= 1:
        return [ReadUnit(host, queue, part, origin, str(seg))]
    share = size / parts
    cuts = [0]
    for off in block_offsets(seg):
        if off >= share * len(cuts):
            cuts.append(off)
    bounds: list[int | None] = [*cuts, None]
    return [ReadUnit(host, queue, part, origin, str(seg), s, e) for s, e in itertools.pairwise(bounds)
            if s is not None]
