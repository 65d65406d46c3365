"""Beam's names that sparkbeam does not have: each says so, by name, when it is used.

``import sparkbeam as beam`` code reaches Beam's names as module attributes
(``beam.io.ReadFromPubSub``, ``beam.transforms.core.RestrictionProvider``) and as modules
(``import sparkbeam.io.gcp.bigquery``). A name Beam has and sparkbeam does not raises
``UnsupportedBeamFeature`` (a ``NotImplementedError``) naming it, with the reason where
one is known; a module attribute that Beam's module has as a submodule
(``beam.transforms.combiners.core``) is sparkbeam's module of that path, when it exists.
Names Beam does not have either get Python's usual ``AttributeError``.

The record of Beam's names is ``sparkbeam._beam_names`` (data, regenerated from the
installed apache-beam by ``python -m tests.sdk.beam_names``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["UnsupportedBeamFeature", "install_module_finder", "module_getattr"]


class UnsupportedBeamFeature(NotImplementedError):
    """A Beam name sparkbeam does not implement.

    Deliberately not an ``AttributeError``: ``from sparkbeam.io import ReadFromPubSub``
    then fails with this message rather than Python's "cannot import name"; the price is
    that ``hasattr(module, name)`` raises it too, for Beam's names that sparkbeam lacks.
    """


# Why whole areas of Beam are missing, by the longest matching prefix of the Beam name.
_REASONS = {
    "apache_beam.dataframe": "the DataFrame API is not supported",
    "apache_beam.ml": "Beam's ML transforms (RunInference, MLTransform) are not supported",
    "apache_beam.yaml": "Beam YAML is not supported",
    "apache_beam.io.gcp": "Google Cloud IO is not supported; file IO reads and writes local or shared file systems",
    "apache_beam.io.aws": "AWS IO is not supported; file IO reads and writes local or shared file systems",
    "apache_beam.io.azure": "Azure IO is not supported; file IO reads and writes local or shared file systems",
    "apache_beam.io.external": "cross-language IO is not supported",
    "apache_beam.io.kafka": "sparkbeam's Kafka IO is ReadFromKafka and WriteToKafka on Spark's Kafka connector; Beam's expansion-service names are not supported",
    "apache_beam.io.ReadFromPubSub": "Pub/Sub is not supported",
    "apache_beam.io.WriteToPubSub": "Pub/Sub is not supported",
    "apache_beam.io.ReadFromBigQuery": "BigQuery is not supported",
    "apache_beam.io.WriteToBigQuery": "BigQuery is not supported",
    "apache_beam.io.BigQueryDisposition": "BigQuery is not supported",
    "apache_beam.transforms.external": "cross-language transforms are not supported",
    "apache_beam.ExternalTransform": "cross-language transforms are not supported",
    "apache_beam.JavaExternalTransform": "cross-language transforms are not supported",
    "apache_beam.managed": "managed (cross-language) transforms are not supported",
    "apache_beam.transforms.managed": "managed (cross-language) transforms are not supported",
    "apache_beam.transforms.core.RestrictionProvider": "splittable DoFns are not supported",
    "apache_beam.io.restriction_trackers": "splittable DoFns are not supported",
    "apache_beam.io.watermark_estimators": "splittable DoFns are not supported; sparkbeam.io.watermarks has watermark estimators for real streams",
    "apache_beam.transforms.periodicsequence": "PeriodicImpulse and PeriodicSequence are not supported; sparkbeam.io.ReadFromRate is a generated stream",
    "apache_beam.runners": "sparkbeam runs pipelines on Spark: SparkRunner (DirectRunner and Beam's other local runner names map to it)",
    "apache_beam.portability": "Beam's portability framework is not part of sparkbeam",
    "apache_beam.transforms.sql": "SqlTransform (cross-language) is not supported",
}
# Encrypted grouping, by each name Beam gives it.
_ENCRYPTION = "encrypted grouping (GroupByEncryptedKey and its secrets) is not implemented; use GroupByKey"
for _name in ("GroupByEncryptedKey", "Secret", "GcpSecret", "GcpHsmGeneratedSecret"):
    for _module in ("apache_beam", "apache_beam.transforms", "apache_beam.transforms.util"):
        _REASONS[f"{_module}.{_name}"] = _ENCRYPTION


def _reason(beam_name: str) -> str:
    parts = beam_name.split(".")
    for end in range(len(parts), 0, -1):
        reason = _REASONS.get(".".join(parts[:end]))
        if reason:
            return reason
    return "not implemented yet"


def unsupported(beam_name: str) -> UnsupportedBeamFeature:
    msg = (
        f"{beam_name} is not supported by sparkbeam: {_reason(beam_name)} "
        "(see 'Not supported yet' in sparkbeam's README)"
    )
    return UnsupportedBeamFeature(msg)


def _record() -> Any:
    from sparkbeam import _beam_names  # loaded on the first miss: it is large

    return _beam_names


def _sparkbeam_module_for(beam_module: str) -> ModuleType | None:
    """sparkbeam's module at the same path as a Beam module, if there is one."""
    mirrors = {beam: ours for ours, beam in _record().MIRRORED.items()}
    candidate = mirrors.get(beam_module, "sparkbeam" + beam_module[len("apache_beam") :])
    try:
        return importlib.import_module(candidate)
    except (ImportError, UnsupportedBeamFeature):
        return None


def module_getattr(module_name: str, beam_module: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``module_name``, which stands for ``beam_module``."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        module = sys.modules[module_name]
        if hasattr(module, "__path__"):
            # A submodule of ours not imported yet: import it, as Beam's package does.
            try:
                return importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{module_name}.{name}":
                    raise
        names = _record().NAMES.get(beam_module, {})
        if name not in names:
            msg = f"module {module_name!r} has no attribute {name!r} (nor has Beam's {beam_module})"
            raise AttributeError(msg)
        target = names[name]
        if target is not None:
            ours = _sparkbeam_module_for(target)
            if ours is not None:
                return ours
            raise unsupported(target)
        raise unsupported(f"{beam_module}.{name}")

    return __getattr__


class _UnsupportedModuleFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: an import of ``sparkbeam.X`` that found nothing, where
    ``apache_beam.X`` is one of Beam's modules, fails saying it is not supported."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("sparkbeam."):
            return None
        beam_name = "apache_beam" + fullname[len("sparkbeam") :]
        if beam_name in _record().MODULES:
            raise unsupported(beam_name)
        return None


def install_module_finder() -> None:
    if not any(isinstance(finder, _UnsupportedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_UnsupportedModuleFinder())
