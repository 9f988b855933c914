"""Hypothesis's example database, shared by several fuzzers (``--fuzz-db``): a failure one of them found replays
first in the others' next round, before anything new is drawn.

The databases are Hypothesis's own: :class:`~hypothesis.database.DirectoryBasedExampleDatabase` on a directory
every fuzzer sees (one machine, or a shared filesystem), or :class:`~hypothesis.extra.redis.RedisExampleDatabase`
at a ``redis://`` URL (needs the ``redis`` package).  One change of policy (:class:`Shared`): nothing is ever
deleted.  Hypothesis deletes an example that no longer fails when it replays it, and the fuzzer that found a
failure counts it as already found in its later rounds (it is not shrunk twice); without this the finder would
delete its finding before the others replayed it.  A bug torch fixes costs one replay per round until the
directory is cleared.

Each fuzz target keeps its examples under its own key (the target's name), so an FSDP1 finding is not replayed
as an FSDP2 draw.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase


class Shared(ExampleDatabase):
    """``db`` with deletions turned off (see the module)."""

    def __init__(self, db: ExampleDatabase, where: str):
        super().__init__()
        self.db, self.where = db, where

    def __repr__(self) -> str:
        return f"Shared({self.where})"

    def save(self, key: bytes, value: bytes) -> None:
        self.db.save(key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.db.fetch(key)

    def delete(self, key: bytes, value: bytes) -> None:
        """Kept: another fuzzer may not have replayed it yet."""

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.db.save(dest, value)


class DatabaseError(ValueError):
    """A ``--fuzz-db`` value that names no usable database."""


def open_database(spec: str) -> ExampleDatabase:
    """The shared database ``spec`` names: ``redis://HOST:PORT[/DB]``, or a directory (made if missing)."""
    if spec.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise DatabaseError(f"{spec}: a Redis database needs the redis package (pip install redis)") from None
        return Shared(RedisExampleDatabase(redis.Redis.from_url(spec)), spec)
    return Shared(DirectoryBasedExampleDatabase(spec), spec)
