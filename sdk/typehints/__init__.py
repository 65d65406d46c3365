"""Type hints with Beam's names (``sparkbeam.typehints``, also ``beam.typehints``).

>>> from sparkbeam.typehints import KV, Iterable, with_input_types
>>> KV[str, Iterable[int]]
Tuple[<class 'str'>, Iterable[<class 'int'>]]

Declared types propagate through the pipeline (``PCollection.element_type``) and are
checked when each transform is applied, as Beam checks them: a ``GroupByKey`` applied to
elements declared as anything but pairs fails at construction, naming both transforms.
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.typehints import decorators, typehints
from sparkbeam.typehints.decorators import (
    TypeCheckError,
    WithTypeHints,
    disable_type_annotations,
    no_annotations,
    with_input_types,
    with_output_types,
)
from sparkbeam.typehints.typehints import (
    KV,
    Any,
    Collection,
    Dict,
    FrozenSet,
    Generator,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeConstraint,
    TypeVariable,
    Union,
    WindowedValue,
)

__all__ = [
    "KV",
    "Any",
    "Collection",
    "Dict",
    "FrozenSet",
    "Generator",
    "Iterable",
    "Iterator",
    "List",
    "Mapping",
    "Optional",
    "Sequence",
    "Set",
    "Tuple",
    "TypeCheckError",
    "TypeConstraint",
    "TypeVariable",
    "Union",
    "WindowedValue",
    "WithTypeHints",
    "decorators",
    "disable_type_annotations",
    "no_annotations",
    "typehints",
    "with_input_types",
    "with_output_types",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.typehints")
