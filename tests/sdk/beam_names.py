"""Records Beam's public names, for sparkbeam's "not supported" errors (``sdk/_beam_names.py``).

Regenerate after upgrading apache-beam: ``python -m tests.sdk.beam_names``. The record
holds, for each Beam module that sparkbeam mirrors, its public names (with the module a
name refers to, for module attributes), and the names of all of Beam's public modules.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import pprint
import typing
from typing import Any

# sparkbeam's modules that stand for Beam's (sparkbeam module -> Beam module).
MIRRORED = {
    "sparkbeam": "apache_beam",
    "sparkbeam.coders": "apache_beam.coders",
    "sparkbeam.coders.coder_impl": "apache_beam.coders.coder_impl",
    "sparkbeam.coders.coders": "apache_beam.coders.coders",
    "sparkbeam.coders.typecoders": "apache_beam.coders.typecoders",
    "sparkbeam.io": "apache_beam.io",
    "sparkbeam.io.fileio": "apache_beam.io.fileio",
    "sparkbeam.io.filesystem": "apache_beam.io.filesystem",
    "sparkbeam.io.filesystems": "apache_beam.io.filesystems",
    "sparkbeam.io.iobase": "apache_beam.io.iobase",
    "sparkbeam.io.localfilesystem": "apache_beam.io.localfilesystem",
    "sparkbeam.io.range_trackers": "apache_beam.io.range_trackers",
    "sparkbeam.io.textio": "apache_beam.io.textio",
    "sparkbeam.io.parquetio": "apache_beam.io.parquetio",
    "sparkbeam.options": "apache_beam.options",
    "sparkbeam.options.pipeline_options": "apache_beam.options.pipeline_options",
    "sparkbeam.pipeline": "apache_beam.pipeline",
    "sparkbeam.pvalue": "apache_beam.pvalue",
    "sparkbeam.runners": "apache_beam.runners",
    "sparkbeam.runners.runner": "apache_beam.runners.runner",
    "sparkbeam.testing": "apache_beam.testing",
    "sparkbeam.testing.test_pipeline": "apache_beam.testing.test_pipeline",
    "sparkbeam.testing.test_stream": "apache_beam.testing.test_stream",
    "sparkbeam.testing.util": "apache_beam.testing.util",
    "sparkbeam.transforms": "apache_beam.transforms",
    "sparkbeam.transforms.combiners": "apache_beam.transforms.combiners",
    "sparkbeam.transforms.core": "apache_beam.transforms.core",
    "sparkbeam.transforms.ptransform": "apache_beam.transforms.ptransform",
    "sparkbeam.transforms.stats": "apache_beam.transforms.stats",
    "sparkbeam.transforms.trigger": "apache_beam.transforms.trigger",
    "sparkbeam.transforms.util": "apache_beam.transforms.util",
    "sparkbeam.transforms.window": "apache_beam.transforms.window",
    "sparkbeam.trigger": "apache_beam.transforms.trigger",
    "sparkbeam.typehints": "apache_beam.typehints",
    "sparkbeam.typehints.decorators": "apache_beam.typehints.decorators",
    "sparkbeam.typehints.typehints": "apache_beam.typehints.typehints",
    "sparkbeam.utils": "apache_beam.utils",
    "sparkbeam.utils.timestamp": "apache_beam.utils.timestamp",
    "sparkbeam.utils.windowed_value": "apache_beam.utils.windowed_value",
    "sparkbeam.window": "apache_beam.transforms.window",
}

_NOT_PUBLIC_MODULE_PARTS = (
    "_test", "_it", "_microbenchmark", "_pb2", "test_utils", "test_data", "benchmarks", "examples",
    "portability.api", "apache_beam.internal", "apache_beam.tools",
)
_STOP_NAMES = {"TYPE_CHECKING"}


def public_modules() -> list[str]:
    import apache_beam

    names = []
    for info in pkgutil.walk_packages(apache_beam.__path__, "apache_beam.", onerror=lambda name: None):
        if any(part in info.name for part in _NOT_PUBLIC_MODULE_PARTS):
            continue
        names.append(info.name)
    return sorted(names)


def public_names(module_name: str) -> dict[str, str | None]:
    """A Beam module's public names: each maps to the module it is, or None."""
    module = importlib.import_module(module_name)
    names: dict[str, str | None] = {}
    for name, value in vars(module).items():
        if name.startswith("_") or name in _STOP_NAMES or isinstance(value, typing.TypeVar):
            continue
        if inspect.ismodule(value):
            if value.__name__.startswith("apache_beam."):
                names[name] = value.__name__
            continue
        origin = getattr(value, "__module__", None)
        if (inspect.isclass(value) or inspect.isfunction(value) or origin == "typing") and not (origin or "").startswith("apache_beam"):
            continue  # imported from elsewhere (typing.Any, collections.OrderedDict, ...)
        names[name] = None
    return dict(sorted(names.items()))


def record() -> dict[str, Any]:
    import apache_beam

    modules = public_modules()
    # Import every module first: a package's attributes include the submodules imported so
    # far, so the record would otherwise depend on what ran before.
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # optional dependencies (cloud clients, ML frameworks) are missing
            continue
    # Beam's core imports two trigger names into itself on first use of windowing.
    from apache_beam.transforms import core, window

    core.Windowing(window.GlobalWindows())
    return {
        "version": apache_beam.__version__,
        "modules": modules,
        "names": {beam: public_names(beam) for beam in sorted(set(MIRRORED.values()))},
    }


def write(path: str) -> None:
    data = record()
    text = (
        '"""Beam\'s public names, recorded from apache-beam ' + data["version"] + ' by tests/sdk/beam_names.py\n'
        "(``python -m tests.sdk.beam_names`` regenerates it): what sparkbeam's \"not supported\" errors\n"
        'know of. Data, not code."""\n\n'
        f"BEAM_VERSION = {data['version']!r}\n\n"
        f"MIRRORED = {pprint.pformat(MIRRORED, width=120)}\n\n"
        f"MODULES = frozenset({pprint.pformat(data['modules'], width=120, compact=True)})\n\n"
        f"NAMES = {pprint.pformat(data['names'], width=120, compact=True)}\n"
    )
    with open(path, "w") as handle:
        handle.write(text)


if __name__ == "__main__":
    write(os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "_beam_names.py"))
