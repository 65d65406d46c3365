"""What a file write is made of: the ``FileSink`` that writes one file, and the names of
its shards (re-exported by ``sparkbeam.io.filewrites``).

Both the batch write (``filewrites``) and the per-step write of streaming runs
(``stepfiles``, which ``filewrites`` hands unbounded input to) name shards the same way;
this module sits below both.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_SHARD_NAME_TEMPLATE", "FileSink", "check_shard_name_template", "shard_file_name"]

DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"



class FileSink:
    """Writes one file: ``open(path)`` returns a writer with ``write(element)`` and ``close()``.

    Subclasses must pickle (they travel to the executors).
    """

    def open(self, path: str) -> Any:
        raise NotImplementedError


def check_shard_name_template(owner: str, template: str | None) -> str:
    """Beam's default (``-SSSSS-of-NNNNN``) for None; other templates need S and N, or ''."""
    if template is None:
        return DEFAULT_SHARD_NAME_TEMPLATE
    if not isinstance(template, str):
        msg = f"{owner}: shard_name_template must be a string, got {template!r}"
        raise TypeError(msg)
    if "W" in template or "V" in template:
        msg = f"{owner}: windowed shard names (W or V in shard_name_template={template!r}) are not supported by sparkbeam"
        raise NotImplementedError(msg)
    if template and ("S" not in template or "N" not in template):
        msg = f"{owner}: shard_name_template needs S (shard) and N (count) placeholders, or '', got {template!r}"
        raise ValueError(msg)
    return template


def shard_file_name(prefix: str, template: str, suffix: str, shard: int, num_shards: int) -> str:
    """A shard's file name: each run of S (shard) and N (count) in the template, zero-padded.

    >>> shard_file_name("out/part", "-SSSSS-of-NNNNN", ".csv", 2, 10)
    'out/part-00002-of-00010.csv'
    """
    name = template
    for letter, number in (("S", shard), ("N", num_shards)):
        start = name.find(letter)
        if start < 0:
            continue
        end = start
        while end < len(name) and name[end] == letter:
            end += 1
        name = name[:start] + str(number).zfill(end - start) + name[end:]
    return f"{prefix}{name}{suffix}"
