"""``DoFnParam``, the default value that asks for something other than the element
(re-exported by ``sparkbeam.dofn``).

It sits below ``sparkbeam.typehints.decorators``, which reads a DoFn's signature and skips
the parameters a runner fills in, and below the state and timer specs, whose markers are
parameters too; ``sparkbeam.dofn`` builds on all three.
"""

from __future__ import annotations

import attrs

__all__ = ["DoFnParam"]


@attrs.frozen
class DoFnParam:
    """A default value that asks the runner to pass something other than the element."""

    name: str

    def __repr__(self) -> str:
        return self.name
