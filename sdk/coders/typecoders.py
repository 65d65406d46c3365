"""The coder registry: which coder a type hint gets (``coders.registry``).

>>> registry.get_coder(int)
VarIntCoder
>>> registry.get_coder(typehints.KV[str, int])
TupleCoder[StrUtf8Coder, VarIntCoder]

``registry.register_coder(MyType, MyCoder)`` makes ``get_coder(MyType)`` return
``MyCoder()``; a type with no coder gets the fallback, ``FastPrimitivesCoder``.
"""

from __future__ import annotations

from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders import coders
from sparkbeam.typehints import typehints

__all__ = ["CoderRegistry", "registry"]


class CoderRegistry:
    """Type hints to coder classes, with Beam's standard entries and a fallback."""

    def __init__(self, fallback_coder: Any = None) -> None:
        self._coders: dict[Any, type[coders.Coder]] = {}
        self.custom_types: list[Any] = []
        self.register_standard_coders(fallback_coder)

    def register_standard_coders(self, fallback_coder: Any) -> None:
        for hint, coder in (
            (int, coders.VarIntCoder),
            (float, coders.FloatCoder),
            (bytes, coders.BytesCoder),
            (bool, coders.BooleanCoder),
            (str, coders.StrUtf8Coder),
            (typehints.TupleConstraint, coders.TupleCoder),
            (typehints.DictConstraint, coders.MapCoder),
        ):
            self._coders[hint] = coder
        self._fallback_coder = fallback_coder or _FirstOf([coders.ProtoCoder, coders.FastPrimitivesCoder])

    def register_fallback_coder(self, fallback_coder: Any) -> None:
        self._fallback_coder = _FirstOf([fallback_coder, self._fallback_coder])

    def register_coder(self, typehint_type: Any, typehint_coder_class: type[coders.Coder]) -> None:
        """Use ``typehint_coder_class()`` for elements of ``typehint_type``."""
        if not isinstance(typehint_coder_class, type):
            msg = f"Coder registration requires a coder class object. Received {typehint_coder_class!r} instead."
            raise TypeError(msg)
        if typehint_type not in self.custom_types:
            self.custom_types.append(typehint_type)
        self._coders[typehint_type] = typehint_coder_class

    def get_coder(self, typehint: Any) -> coders.Coder:
        """The coder for elements of ``typehint`` (a type or a hint such as ``KV[str, int]``)."""
        if isinstance(typehint, typehints.TypeConstraint):
            coder_class = self._coders.get(type(typehint))
            if coder_class is not None:
                return coder_class.from_type_hint(typehint, self)
            if isinstance(typehint, typehints.IterableTypeConstraint):
                return coders.IterableCoder.from_type_hint(typehint, self)
            if isinstance(typehint, typehints.ListConstraint):
                return coders.ListCoder.from_type_hint(typehint, self)
            if typehints.is_nullable(typehint):
                return coders.NullableCoder.from_type_hint(typehint, self)
        else:
            coder_class = self._coders.get(typehint)
            if coder_class is not None:
                return coder_class.from_type_hint(typehint, self)
        return self._fallback_coder.from_type_hint(typehint, self)

    def get_custom_type_coder_tuples(self, types: Any = None) -> list[tuple[Any, type[coders.Coder]]]:
        return [(t, self._coders[t]) for t in self.custom_types if types is None or t in types]

    def load_custom_type_coder_tuples(self, type_coder: Any) -> None:
        for hint, coder in type_coder:
            self.register_coder(hint, coder)

    def verify_deterministic(self, key_coder: coders.Coder, op_name: str, silent: bool = True) -> coders.Coder:
        if key_coder.is_deterministic():
            return key_coder
        msg = (
            f'The key coder "{key_coder!r}" for {op_name} is not deterministic. This may result in '
            "incorrect pipeline output. This can be fixed by adding a type hint to the operation "
            "preceding the GroupByKey step, and for custom key classes, by writing a deterministic "
            "custom Coder."
        )
        return key_coder.as_deterministic_coder(op_name, msg)


class _FirstOf:
    """The first of several coder classes that can code a hint."""

    def __init__(self, candidates: list[Any]) -> None:
        self._candidates = candidates

    def from_type_hint(self, typehint: Any, registry: CoderRegistry) -> coders.Coder:
        problems = []
        for candidate in self._candidates:
            try:
                return candidate.from_type_hint(typehint, registry)
            except Exception as error:
                problems.append(f"{candidate!r} could not provide a Coder for type {typehint!r}: {error}")
        msg = f"Cannot provide coder for {typehint!r}: {'; '.join(problems)}"
        raise ValueError(msg)


registry = CoderRegistry()


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.coders.typecoders")
