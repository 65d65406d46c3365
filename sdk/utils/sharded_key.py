"""Beam's path ``apache_beam.utils.sharded_key``: ``ShardedKey``, a user key with a shard id.

``GroupIntoBatches.WithShardedKey`` keys its batches with it, so that one hot key's
elements can be batched by several workers at once; ``sharded.key`` is the user's key.

>>> sharded = ShardedKey("user-7", b"shard-0")
>>> sharded.key
'user-7'
>>> sharded == ShardedKey("user-7", b"shard-0")
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["ShardedKey"]


class ShardedKey:
    """A user key and an opaque ``bytes`` shard id; equal, hashed and pickled by both, as Beam's."""

    __slots__ = ("_key", "_shard_id")

    def __init__(self, key: Any, shard_id: bytes) -> None:
        if not isinstance(shard_id, bytes):
            msg = f"ShardedKey({key!r}, ...): the shard id must be bytes, not {shard_id!r}"
            raise TypeError(msg)
        self._key = key
        self._shard_id = shard_id

    @property
    def key(self) -> Any:
        return self._key

    def __repr__(self) -> str:
        return f"({self._key!r}, {self._shard_id!r})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key == other._key and self._shard_id == other._shard_id

    def __hash__(self) -> int:
        return hash((self._key, self._shard_id))

    def __reduce__(self) -> tuple:
        return ShardedKey, (self._key, self._shard_id)
