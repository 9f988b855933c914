"""Under pytest-xdist: the named fuzz targets dealt into one group per worker, and each group sent whole to one
worker, so that the worker runs one schedule over it (:mod:`parityfuzz.engine.schedule`), as a run without xdist
does over every target.

xdist's own ``--dist loadgroup`` would do it from ``xdist_group`` markers, but it carries a test's group in its node
id, which pytest 9.2 no longer lets a plugin change: the groups are silently dropped
(pytest-dev/pytest-xdist#1386, open).  So each worker writes which of its node ids belong to which group into a
directory the controller names (:data:`KEY` in the worker's input) before it reports its collection, and the
controller's scheduler (in place of ``--dist load``, the default of ``-n``: :func:`make_scheduler`) reads them: load
scheduling where a group is one unit of work and every other test one of its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: The worker input naming the directory of the groups' files (absent: no grouping, e.g. another ``--dist``).
KEY = "parityfuzz_groups"


def group_name(k: int) -> str:
    return f"parityfuzz-schedule-{k}"


def deal(nodeids: list[str], workers: int) -> dict[str, str]:
    """The named fuzz targets' node ids (in collection order: every worker collects alike) -> their group, dealt
    round-robin into one group per worker."""
    return {nodeid: group_name(k % workers) for k, nodeid in enumerate(nodeids)}


def write(directory: str | Path, worker: str, groups: dict[str, str]) -> None:
    """Worker ``worker``'s groups, written whole before it reports its collection (atomically: the controller may
    read as soon as the file is there)."""
    path = Path(directory) / f"{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def read(directory: str | Path) -> dict[str, str]:
    """Every worker's groups (they agree where they overlap: the same collection dealt alike)."""
    out: dict[str, str] = {}
    for path in sorted(Path(directory).glob("*.json")):
        out.update(json.loads(path.read_text()))
    return out


def make_scheduler(config, log, directory: str | Path):
    """xdist's load scheduling with each group of named fuzz targets one unit of work (LoadScopeScheduling with the
    group as the scope; every other test its own scope, as under ``load``)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # (asked once every worker's collection is in, so every file is written)
                self.groups = read(directory)
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)
