"""Column kinds for schema'd text reads (CSV, JSON): inferred as Beam's pandas reads infer them.

Beam's ``ReadFromCsv`` and ``ReadFromJson`` take their schema from the first matching file,
read with pandas, and emit one NamedTuple row per record. sparkbeam does the same without
pandas: the first file's first ``SAMPLE_RECORDS`` records decide the columns and each
column's *kind*, and every record of every file is converted to those kinds.

Kinds: ``int``, ``float``, ``bool``, ``str``, ``boolstr`` (CSV bools with missing values,
which Beam emits as the strings 'True' and 'False'), and ``any`` for a column that is empty
in the sample (each value then keeps the type it parses to). ``dtype=`` overrides kinds, and a
column it names that the sample lacks is added.

>>> kind_of_dtype("ReadFromCsv", "x", "Int64")
'int'
>>> kind_of_dtype("ReadFromCsv", "x", str)
'str'
"""

from __future__ import annotations

from typing import Any

__all__ = ["KINDS", "SAMPLE_RECORDS", "dtype_kinds", "kind_of_dtype"]

SAMPLE_RECORDS = 10_000
KINDS = ("int", "float", "bool", "str", "boolstr", "any")

_DTYPE_NAMES = {
    "int": "int", "int8": "int", "int16": "int", "int32": "int", "int64": "int",
    "uint8": "int", "uint16": "int", "uint32": "int", "uint64": "int",
    "float": "float", "float16": "float", "float32": "float", "float64": "float", "double": "float",
    "bool": "bool", "boolean": "bool",
    "str": "str", "string": "str", "object": "str", "O": "str",
}
_DTYPE_TYPES = {int: "int", float: "float", bool: "bool", str: "str", object: "str"}


def kind_of_dtype(owner: str, column: Any, dtype: Any) -> str:
    """The kind a pandas-style dtype (``int``, ``'float64'``, ``'Int64'``, ``str``...) stands for."""
    if isinstance(dtype, type) and dtype in _DTYPE_TYPES:
        return _DTYPE_TYPES[dtype]
    name = getattr(dtype, "name", dtype)
    if isinstance(name, str):
        kind = _DTYPE_NAMES.get(name) or _DTYPE_NAMES.get(name.lower())
        if kind:
            return kind
    msg = (
        f"{owner}: dtype {dtype!r} for column {column!r} is not supported; use int, float, bool "
        "or str (or their pandas names such as 'int64', 'float64', 'boolean', 'string')"
    )
    raise NotImplementedError(msg)


def dtype_kinds(owner: str, dtype: Any, columns: list[str]) -> tuple[dict[str, str], str | None]:
    """``(per-column kinds, kind for every column)`` from a ``dtype=`` argument."""
    if dtype is None or dtype is False:
        return {}, None
    if dtype is True:
        msg = f"{owner}: dtype=True (pandas' own dtype inference) is not supported; leave dtype unset or pass a dict of column types"
        raise NotImplementedError(msg)
    if isinstance(dtype, dict):
        return {str(column): kind_of_dtype(owner, column, value) for column, value in dtype.items()}, None
    return {}, kind_of_dtype(owner, "*", dtype)
