"""Execute the tutorial notebooks and write their outputs back, so GitHub shows them.

    python notebooks/regenerate.py                        # every notebook
    python notebooks/regenerate.py 03 04                  # some of them (name, prefix or path)

Each notebook runs top to bottom on a fresh kernel that uses this interpreter
(``sys.executable``), so each starts its own embedded Spark. The outputs are written back
without Spark's log lines, and the figure of the cell tagged ``readme-image`` is saved
as ``notebooks/images/watermarks_between_stages.png`` for the README.

``tests/test_notebooks.py`` imports this module: it executes the notebooks the same way
and checks that the committed outputs are current (see ``comparable_outputs``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent
IMAGE = NOTEBOOKS / "images" / "watermarks_between_stages.png"
IMAGE_TAG = "readme-image"
KERNEL_NAME = "sparkbeam-python"
# Spark's start-up can take a minute on a busy machine; a pipeline run a few more.
CELL_TIMEOUT = int(os.environ.get("SPARKBEAM_NOTEBOOK_CELL_TIMEOUT", "900"))
NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}

# Lines the JVM and Spark write to the kernel's stderr: they vary by machine and run. So do
# sparkbeam's progress lines, written only when a run outlasts the progress interval.
_SPARK_NOISE = re.compile(
    r"^(\d\d:\d\d:\d\d sparkbeam progress: .*"
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) .*"
    r"|WARNING: Using incubator modules.*"
    r"|Using Spark's default log4j profile.*"
    r"|Setting default log level to .*"
    r"|To adjust logging level use .*"
    r"|\s*\[Stage \d+:.*\]\s*"
    r"|\s+at [\w.$]+\(.*\)"  # JVM stack frames of a logged warning
    r")$"
)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_DURATION = re.compile(r"\b\d+(\.\d+)?\s?(s|ms|sec|seconds)\b")


def notebooks(names: list[str] | None = None) -> list[Path]:
    """The tutorial notebooks in order, or those named (by a prefix of the file name, or path)."""
    every = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    chosen = []
    for name in names:
        matches = [p for p in every if p.name.startswith(Path(name).name) or Path(name).resolve() == p]
        if not matches:
            msg = f"no notebook {name!r}; the notebooks are {[p.name for p in every]}"
            raise SystemExit(msg)
        chosen.extend(matches)
    return chosen


def kernel_manager(kernels_dir: str) -> Any:
    """A kernel manager whose kernel runs this interpreter, with Spark's workers on it too.

    The kernel spec is written to a private directory, so the test works on a fresh machine
    (CI) without ``ipykernel install`` and whatever ``python3`` kernel is installed.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = Path(kernels_dir) / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    specs = KernelSpecManager(kernel_dirs=[str(kernels_dir)])
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def execute(path: Path) -> Any:
    """The notebook at ``path`` executed on a fresh kernel; raises on the first failing cell."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="sparkbeam-kernels-") as kernels_dir:
        km = kernel_manager(kernels_dir)
        client = NotebookClient(
            nb,
            km=km,
            timeout=CELL_TIMEOUT,
            record_timing=False,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        try:
            client.execute()
        finally:
            # nbclient leaves a kernel it did not create running; this one is ours to stop.
            if km.has_kernel:
                km.shutdown_kernel()
    return nb


def execute_all(paths: list[Path], at_once: int = 2) -> dict[Path, Any]:
    """Each notebook executed as ``execute`` does, ``at_once`` of them at a time (each its own
    kernel and Spark): per path, the executed notebook or the exception it raised.

    A notebook's run waits on Spark's scheduling and the kernel's messages more than it
    computes, so two at a time take little longer than one on two cores.
    """
    from concurrent.futures import ThreadPoolExecutor

    def run(path: Path) -> Any:
        try:
            return execute(path)
        except Exception as error:  # handed to the caller, per notebook
            return error

    with ThreadPoolExecutor(max_workers=max(1, at_once)) as pool:
        return dict(zip(paths, pool.map(run, paths)))


def without_spark_noise(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not _SPARK_NOISE.match(line.rstrip("\n")))


def clean(nb: Any) -> Any:
    """Drop Spark's log lines (and outputs left empty by that) and machine-specific metadata."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in _merge_streams(cell.outputs):
            if output.output_type == "stream":
                output.text = without_spark_noise(output.text)
                if not output.text:
                    continue
            kept.append(output)
        cell.outputs = kept
    nb.metadata = nbformat.from_dict(NOTEBOOK_METADATA)
    return nb


def _merge_streams(outputs: list[Any]) -> list[Any]:
    """Adjacent outputs of one stream as one (how the chunks are split depends on timing)."""
    merged: list[Any] = []
    for output in outputs:
        if (
            output.output_type == "stream"
            and merged
            and merged[-1].output_type == "stream"
            and merged[-1].name == output.name
        ):
            merged[-1].text += output.text
        else:
            merged.append(nbformat.from_dict(dict(output)))
    return merged


def _normalise(text: str) -> str:
    text = without_spark_noise(text)
    text = _ADDRESS.sub("0x…", text)
    return _DURATION.sub("<duration>", text).rstrip()


def comparable_outputs(nb: Any) -> list[list[tuple[str, ...]]]:
    """Per code cell, its outputs with what legitimately varies taken out.

    Streams and ``text/plain`` are compared as text without Spark's log lines, memory
    addresses and durations; an image only has to be there (its bytes vary with the
    matplotlib version and fonts); ``text/html`` is left out, as a table's ``text/plain``
    carries the same values.
    """
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs: list[tuple[str, ...]] = []
        for output in _merge_streams(cell.outputs):
            kind = output.output_type
            if kind == "stream":
                text = _normalise(output.text)
                if text:
                    outputs.append(("stream", output.name, text))
            elif kind in ("display_data", "execute_result"):
                data = output.get("data", {})
                if "image/png" in data:
                    outputs.append(("image",))
                elif "text/plain" in data:
                    outputs.append(("text", _normalise(data["text/plain"])))
            elif kind == "error":
                outputs.append(("error", output.ename, _normalise(output.evalue)))
        cells.append(outputs)
    return cells


def readme_image(nb: Any) -> bytes | None:
    """The PNG of the first figure in the cell tagged ``readme-image``."""
    for cell in nb.cells:
        if IMAGE_TAG in cell.get("metadata", {}).get("tags", []):
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                if png:
                    return base64.b64decode(png)
    return None


def regenerate(path: Path, executed: Any) -> None:
    if isinstance(executed, Exception):
        raise executed
    nb = clean(executed)
    nbformat.write(nb, path)
    image = readme_image(nb)
    if image is not None:
        IMAGE.parent.mkdir(exist_ok=True)
        IMAGE.write_bytes(image)
        print(f"  wrote {IMAGE.relative_to(NOTEBOOKS.parent)}")
    print(f"{path.relative_to(NOTEBOOKS.parent)}: written")


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    paths = notebooks(argv)
    for path, executed in execute_all(paths).items():
        regenerate(path, executed)
    print(f"{len(paths)} notebook(s) executed in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
