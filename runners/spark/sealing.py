"""Authenticated bytes for what a stream reads back from its checkpoint directory.

The checkpoint directory holds pickles: the step loop's state (read on the driver), keyed
state and write-ahead-log batches (read on the executors). Unpickling runs code, so whoever
can write the directory could otherwise run code as the stream's user. Each such file (or
each line of a file Spark writes) is *sealed*: prefixed with an HMAC-SHA256 tag computed
with a key kept outside the directory (``checkpoint_key.py``), and opened only after the
tag is checked, in constant time, before anything is unpickled. The tag also covers the
checkpoint's identity (``scope``) and what the bytes are (``purpose``), so a sealed file of
one checkpoint, or of another kind, is refused where it does not belong.

>>> sealer = Sealer(bytes(32), scope="a1b2")
>>> sealed = sealer.seal("loop", b"state")
>>> bytes(sealer.open("loop", sealed, where="/ck/loop.sealed"))
b'state'
>>> try:
...     sealer.open("wal", sealed, where="/ck/wal/0000000003")
... except UnauthenticatedFileError as error:
...     print(str(error)[:40])
/ck/wal/0000000003 failed authentication
"""

from __future__ import annotations

import hashlib
import hmac

import attrs

__all__ = ["MAGIC", "Sealer", "UnauthenticatedFileError"]

#: how every sealed blob starts (the format, should it ever change)
MAGIC = b"sparkbeam-sealed/1\n"
_TAG_BYTES = hashlib.sha256().digest_size


class UnauthenticatedFileError(ValueError):
    """A file read back from a checkpoint failed authentication: it was written with another
    key, belongs to another checkpoint, or was changed since sparkbeam wrote it."""


@attrs.frozen
class Sealer:
    """Seals and opens bytes with one checkpoint key (never shown: not in the repr)."""

    key: bytes = attrs.field(repr=False)
    #: the checkpoint's identity: what one checkpoint sealed does not open in another
    scope: str

    def _tag(self, purpose: str, payload: bytes | memoryview) -> bytes:
        mac = hmac.new(self.key, digestmod=hashlib.sha256)
        mac.update(f"{self.scope}\0{purpose}\0".encode())
        mac.update(payload)
        return mac.digest()

    def seal(self, purpose: str, payload: bytes) -> bytes:
        return MAGIC + self._tag(purpose, payload) + payload

    def open(self, purpose: str, sealed: bytes | memoryview, *, where: str) -> memoryview:
        """The payload of ``sealed`` once its tag is checked (a view: no copy of the bytes);
        raises ``UnauthenticatedFileError`` naming ``where`` if it does not check out."""
        view = memoryview(sealed)
        head = len(MAGIC)
        if bytes(view[:head]) != MAGIC or len(view) < head + _TAG_BYTES:
            msg = (
                f"{where} failed authentication: it is not a sealed sparkbeam checkpoint file (changed or replaced "
                "since sparkbeam wrote it); nothing in it was loaded. Check who can write the checkpoint directory, "
                "then resume from an intact copy or start a new --checkpoint_dir"
            )
            raise UnauthenticatedFileError(msg)
        tag, payload = view[head : head + _TAG_BYTES], view[head + _TAG_BYTES :]
        if not hmac.compare_digest(bytes(tag), self._tag(purpose, payload)):
            msg = (
                f"{where} failed authentication: it was written with another checkpoint key, belongs to another "
                "checkpoint, or was changed since sparkbeam wrote it; nothing in it was loaded. Run with the key "
                "that wrote the checkpoint (--checkpoint_key_file), check who can write the checkpoint directory, "
                "or start a new --checkpoint_dir"
            )
            raise UnauthenticatedFileError(msg)
        return payload

    def key_id(self) -> str:
        """A short name of the key (derived through the MAC: it reveals nothing of the key),
        recorded in the checkpoint's identity to tell a run with another key what is wrong."""
        return hmac.new(self.key, b"sparkbeam checkpoint key id", hashlib.sha256).hexdigest()[:16]
