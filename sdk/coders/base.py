"""The ``Coder`` base classes: what every coder has, and how coders nest.

A coder writes a value *outer* (its bytes are the whole encoding) or *nested* (other bytes
follow, so variable-length values carry their length), as in Beam. A coder that only
defines ``encode``/``decode`` nests by length-prefixing its bytes; the standard coders
implement ``encode_to_stream``/``decode_from_stream`` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkbeam.coders.stream import InputStream, OutputStream

__all__ = ["Coder", "FastCoder"]


class Coder:
    """Encodes values as bytes and decodes them back.

    A subclass defines ``encode`` and ``decode``; it is nested inside other coders (a
    ``TupleCoder``, a ``ListCoder``) by length-prefixing its bytes, as in Beam.
    """

    def encode(self, value: Any) -> bytes:
        msg = f"Encode not implemented: {self!r}."
        raise NotImplementedError(msg)

    def decode(self, encoded: bytes) -> Any:
        msg = f"Decode not implemented: {self!r}."
        raise NotImplementedError(msg)

    # -- nesting: the stream interface the standard coders implement directly --------------
    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        out.write(self.encode(value), nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self.decode(in_stream.read_all(nested))

    def encode_nested(self, value: Any) -> bytes:
        out = OutputStream()
        self.encode_to_stream(value, out, True)
        return out.get()

    def decode_nested(self, encoded: bytes) -> Any:
        return self.decode_from_stream(InputStream(encoded), True)

    def get_impl(self) -> Any:
        """Beam's coder implementation object: what ``_create_impl`` returns where a subclass
        defines it (as Beam's ``FastCoder`` subclasses do), else the coder itself, which has
        the stream methods."""
        impl = self.__dict__.get("_sparkbeam_impl")  # first: FastCoder asks once per value
        if impl is not None:
            return impl
        if type(self)._create_impl is Coder._create_impl:
            return self
        impl = self._create_impl()
        self.__dict__["_sparkbeam_impl"] = impl
        return impl

    def _create_impl(self) -> Any:
        """Beam's hook: a subclass may return a ``sparkbeam.coders.coder_impl.CoderImpl``
        that writes its bytes; ``FastCoder`` then encodes through it."""
        return self

    # -- properties --------------------------------------------------------------------------
    def is_deterministic(self) -> bool:
        """Whether equal values always encode to equal bytes (needed for keys in Beam)."""
        return False

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        """This coder if deterministic, else a deterministic version, else ValueError."""
        if self.is_deterministic():
            return self
        raise ValueError(error_message or f"{self!r} cannot be made deterministic for '{step_label}'.")

    def estimate_size(self, value: Any) -> int:
        """The size of ``value``'s encoding, in bytes."""
        return len(self.encode(value))

    def to_type_hint(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.to_type_hint")

    @classmethod
    def from_type_hint(cls, unused_typehint: Any, unused_registry: Any) -> Coder:
        return cls()

    def is_kv_coder(self) -> bool:
        return False

    def key_coder(self) -> Coder:
        msg = f"Not a KV coder: {self!r}."
        raise ValueError(msg)

    def value_coder(self) -> Coder:
        msg = f"Not a KV coder: {self!r}."
        raise ValueError(msg)

    def _get_component_coders(self) -> Sequence[Coder]:
        return []

    def __repr__(self) -> str:
        return type(self).__name__

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and _fields(self) == _fields(other)

    def __hash__(self) -> int:
        return hash(type(self))


class FastCoder(Coder):
    """A coder defined by its stream methods; ``encode``/``decode`` are derived from them."""

    # Straight to the impl's stream methods where a subclass has one (as Beam's FastCoder goes
    # to its impl), else to the coder's own (get_impl returns the coder itself).
    def encode(self, value: Any) -> bytes:
        out = OutputStream()
        self.get_impl().encode_to_stream(value, out, False)
        return out.get()

    def decode(self, encoded: bytes) -> Any:
        return self.get_impl().decode_from_stream(InputStream(encoded), False)

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        impl = self.get_impl()
        if impl is self:
            msg = f"{type(self).__name__} defines neither encode_to_stream nor _create_impl"
            raise NotImplementedError(msg)
        impl.encode_to_stream(value, out, nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        impl = self.get_impl()
        if impl is self:
            msg = f"{type(self).__name__} defines neither decode_from_stream nor _create_impl"
            raise NotImplementedError(msg)
        return impl.decode_from_stream(in_stream, nested)


class _DeterministicByType(FastCoder):
    """Coders equal to any other instance of their class, deterministic as declared."""

    deterministic = True

    def is_deterministic(self) -> bool:
        return self.deterministic

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


def _fields(coder: Coder) -> dict[str, Any]:
    """A coder's attributes, without the impl ``get_impl`` caches (not part of its identity)."""
    return {name: value for name, value in vars(coder).items() if name != "_sparkbeam_impl"}
