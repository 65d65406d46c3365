"""A bounded trie metric's value: Beam's ``BoundedTrie`` (``Metrics.bounded_trie``).

A bounded trie records sequences of string segments (Beam's IO records ``('gcs', 'bucket',
'path')`` lineage this way) and keeps at most ``bound`` of them (100 by default): past it,
the widest subtree is cut to its prefix, marked truncated, and everything below it then
counts as contained. Values combine associatively, as every metric's do, so updates from
many workers in any order give one value (the bound of a combination is the smaller one).

>>> trie = BoundedTrieData().add(("a", "b")).add(("a", "c"))
>>> trie.size(), trie.contains(("a", "b")), trie.contains(("a", "d"))
(2, True, False)
>>> sorted(trie.get_result())
[('a', 'b', False), ('a', 'c', False)]
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = ["DEFAULT_BOUND", "BoundedTrieData"]

#: Beam's default bound on the sequences a trie keeps
DEFAULT_BOUND = 100


class _Node:
    """A mutable trie node, only ever used inside one operation on ``BoundedTrieData``."""

    __slots__ = ("children", "size")

    def __init__(self) -> None:
        #: None once the node was truncated: everything below it is contained
        self.children: dict[str, _Node] | None = {}
        self.size = 1

    def add(self, segments: tuple[str, ...]) -> int:
        """Adds a sequence below this node; the change in the number of leaves."""
        if self.children is None or not segments:
            return 0
        head, tail = segments[0], segments[1:]
        child = self.children.get(head)
        delta = 0
        if child is None:
            # A new leaf adds one, unless it replaces this node as the leaf it was.
            delta = 1 if self.children else 0
            child = self.children[head] = _Node()
        delta += child.add(tail)
        self.size += delta
        return delta

    def truncate(self) -> None:
        self.children = None
        self.size = 1

    def trim(self) -> int:
        """Cuts the widest subtree's deepest level of leaves into one truncated leaf."""
        if not self.children:
            return 0
        # The widest child; among equals the first by name, so that a trim is reproducible.
        widest = max(sorted(self.children.items()), key=lambda item: item[1].size)[1]
        if widest.size == 1:
            delta = 1 - self.size
            self.truncate()
        else:
            delta = widest.trim()
            self.size += delta
        return delta

    def paths(self) -> Iterable[tuple]:
        if self.children is None:
            yield (True,)
        elif not self.children:
            yield (False,)
        else:
            for name, child in sorted(self.children.items()):
                for path in child.paths():
                    yield (name, *path)


def _tree(paths: frozenset[tuple]) -> _Node:
    root = _Node()
    for path in paths:
        *segments, truncated = path
        root.add(tuple(segments))
        if truncated:
            node: _Node | None = root
            for segment in segments:
                # None below a prefix truncated already, which contains this one
                node = node.children.get(segment) if node is not None and node.children else None
            if node is not None:
                node.truncate()
    _resize(root)
    return root


def _resize(node: _Node) -> int:
    if node.children:
        node.size = max(1, sum(_resize(child) for child in node.children.values()))
    else:
        node.size = 1
    return node.size


@attrs.frozen
class BoundedTrieData:
    """The sequences a bounded trie holds, each ``(*segments, truncated)`` as Beam's
    ``get_result`` gives them, and the bound it keeps them under."""

    paths: frozenset[tuple] = frozenset()
    bound: int = DEFAULT_BOUND

    @staticmethod
    def identity_element() -> BoundedTrieData:
        return BoundedTrieData()

    @staticmethod
    def singleton(segments: Iterable[str]) -> BoundedTrieData:
        return BoundedTrieData().add(segments)

    def add(self, segments: Iterable[str]) -> BoundedTrieData:
        segments = tuple(segments)
        if not segments or (*segments, False) in self.paths:
            return self
        root = _tree(self.paths) if self.paths else _Node()
        root.add(segments)
        return self._bounded(root, self.bound)

    def combine(self, other: BoundedTrieData) -> BoundedTrieData:
        if not other.paths:
            return self if self.bound <= other.bound else attrs.evolve(self, bound=other.bound)
        if not self.paths:
            return other if other.bound <= self.bound else attrs.evolve(other, bound=self.bound)
        root = _tree(self.paths | other.paths)
        return self._bounded(root, min(self.bound, other.bound))

    @staticmethod
    def _bounded(root: _Node, bound: int) -> BoundedTrieData:
        while root.size > bound:
            root.trim()
        return BoundedTrieData(frozenset(root.paths()), bound)

    def size(self) -> int:
        return len(self.paths)

    def contains(self, segments: Iterable[str]) -> bool:
        """Whether the sequence was added, or lies below a truncated prefix (Beam's)."""
        segments = tuple(segments)
        for *prefix, truncated in self.paths:
            if truncated and tuple(prefix) == segments[: len(prefix)]:
                return True
            if tuple(prefix[: len(segments)]) == segments:
                return True
        return False

    def get_result(self) -> set[tuple]:
        return set(self.paths)
