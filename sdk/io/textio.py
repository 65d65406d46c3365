"""Text files: ``ReadFromText`` (one element per line) and ``WriteToText`` (sharded output).

>>> lines = p | ReadFromText("logs/*.txt")                              # doctest: +SKIP
>>> counts | WriteToText("out/counts", file_name_suffix=".txt")         # doctest: +SKIP

Both are primitives the runner executes with Spark's own file reading and writing; writes
are atomic (a failed run leaves nothing under the final names). Streaming runs write one
committed directory per step (``out/counts-step-00000042/counts-00000-of-00001.txt``).
"""

from __future__ import annotations

from typing import Any

from sparkbeam import pvalue
from sparkbeam.ptransform import PTransform

__all__ = ["ReadFromText", "WriteToText"]

_COMPRESSIONS = {"auto", "uncompressed", "gzip", "bzip2", "deflate"}


def _compression(owner: str, value: Any) -> str:
    name = str(getattr(value, "value", value) or "auto").lower()
    if name not in _COMPRESSIONS:
        msg = f"{owner}: compression_type must be one of {sorted(_COMPRESSIONS)}, got {value!r}"
        raise ValueError(msg)
    return name


class ReadFromText(PTransform):
    """Each line of the files matching ``file_pattern`` (a path or glob) as a string element."""

    is_primitive = True

    def __init__(
        self,
        file_pattern: str,
        min_bundle_size: int = 0,
        compression_type: Any = "auto",
        strip_trailing_newlines: bool = True,
        coder: Any = None,
        validate: bool = True,
        skip_header_lines: int = 0,
        **unused_beam_options: Any,
    ) -> None:
        super().__init__()
        if not isinstance(file_pattern, str) or not file_pattern:
            msg = f"ReadFromText: file_pattern must be a non-empty path or glob, got {file_pattern!r}"
            raise ValueError(msg)
        if not isinstance(skip_header_lines, int) or skip_header_lines < 0:
            msg = f"ReadFromText: skip_header_lines must be a non-negative integer, got {skip_header_lines!r}"
            raise ValueError(msg)
        self.file_pattern = file_pattern
        self.compression_type = _compression("ReadFromText", compression_type)
        self.strip_trailing_newlines = strip_trailing_newlines
        self.validate = validate
        self.skip_header_lines = skip_header_lines

    def default_label(self) -> str:
        return "ReadFromText"

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "ReadFromText is a root transform: apply it to the pipeline (p | ReadFromText(...))"
            raise TypeError(msg)
        return pvalue.PCollection(pbegin.pipeline)


class WriteToText(PTransform):
    """Write each element's ``str()`` as a line into shards ``prefix-00000-of-0000N suffix``.

    >>> counts | WriteToText("out/counts", file_name_suffix=".txt")     # doctest: +SKIP

    In batch the shards are ``out/counts-00000-of-00002.txt``, ..., written atomically. In
    a streaming run (unbounded input, or ``--streaming``) each step with elements writes
    its own directory of shards, named as in batch and each with the header and footer:
    ``out/counts-step-00000042/counts-00000-of-00002.txt``. A step's directory appears
    whole, in one rename, and a step run again after a failure replaces it, so each
    element is written exactly once; steps with no elements write nothing (see
    ``sparkbeam.io.stepfiles``).
    """

    is_primitive = True

    def __init__(
        self,
        file_path_prefix: str,
        file_name_suffix: str = "",
        append_trailing_newlines: bool = True,
        num_shards: int = 0,
        shard_name_template: str | None = None,
        coder: Any = None,
        compression_type: Any = "auto",
        header: str | None = None,
        footer: str | None = None,
        **unused_beam_options: Any,
    ) -> None:
        super().__init__()
        if not isinstance(file_path_prefix, str) or not file_path_prefix:
            msg = f"WriteToText: file_path_prefix must be a non-empty path, got {file_path_prefix!r}"
            raise ValueError(msg)
        if not isinstance(num_shards, int) or num_shards < 0:
            msg = f"WriteToText: num_shards must be a non-negative integer (0 lets the runner choose), got {num_shards!r}"
            raise ValueError(msg)
        template = "-SSSSS-of-NNNNN" if shard_name_template is None else shard_name_template
        if template and ("S" not in template or "N" not in template):
            msg = f"WriteToText: shard_name_template needs S (shard) and N (count) placeholders, got {template!r}"
            raise ValueError(msg)
        self.file_path_prefix = file_path_prefix
        self.file_name_suffix = file_name_suffix
        self.append_trailing_newlines = append_trailing_newlines
        self.num_shards = num_shards
        self.shard_name_template = template
        self.compression_type = _compression("WriteToText", compression_type)
        self.header = header
        self.footer = footer

    def default_label(self) -> str:
        return "WriteToText"

    def shard_name(self, shard: int, num_shards: int) -> str:
        """The file name of one shard, from Beam's template (``-SSSSS-of-NNNNN``)."""
        name = self.shard_name_template
        for letter, number in (("S", shard), ("N", num_shards)):
            start = name.find(letter)
            if start < 0:
                continue
            end = start
            while end < len(name) and name[end] == letter:
                end += 1
            name = name[:start] + str(number).zfill(end - start) + name[end:]
        return f"{self.file_path_prefix}{name}{self.file_name_suffix}"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PDone:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.label} writes a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        return pvalue.PDone(pcoll.pipeline)


# Beam defines its CSV and JSON transforms in ``apache_beam.io.textio``; so do we, by name.
from sparkbeam.io.csvio import ReadFromCsv, WriteToCsv  # noqa: E402
from sparkbeam.io.jsonio import ReadFromJson, WriteToJson  # noqa: E402

__all__ += ["ReadFromCsv", "ReadFromJson", "WriteToCsv", "WriteToJson"]
