# ruff: noqa: UP006  (typing generics on purpose: Beam converts them, as these tests check)
"""Functions with evaluated annotations, for the type-hint tests (this module does not use
``from __future__ import annotations``: Beam reads annotations only when they are objects)."""

import typing

import sparkbeam


def ints(x: int) -> int:
    return x


def parse(line: str) -> typing.Tuple[str, int]:
    return (line, 1)


def pairs(x: int) -> typing.Iterable[typing.Tuple[str, int]]:
    return [("k", x)]


def total(values: typing.Iterable[int]) -> int:
    return sum(values)


class IntsToStrings(sparkbeam.DoFn):
    def process(self, element: int) -> typing.Iterable[str]:
        yield str(element)
