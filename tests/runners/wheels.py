"""Packages built by hand for dependency tests: pip installs them offline."""

from __future__ import annotations

import os
import zipfile


def write_wheel(wheelhouse, name: str, source: str, version: str = "1.0") -> None:
    """A pure-Python wheel of one module ``name`` (what pip needs and nothing more)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: sparkbeam-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist_info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    os.makedirs(wheelhouse, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheelhouse, f"{name}-{version}-py3-none-any.whl"), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def write_requirements(path, wheelhouse, *requirements: str) -> str:
    with open(path, "w") as handle:
        handle.write(f"--no-index\n--find-links {wheelhouse}\n" + "".join(f"{r}\n" for r in requirements))
    return str(path)
