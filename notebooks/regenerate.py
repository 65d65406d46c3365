"""Execute the tutorial notebooks and write their outputs back, so GitHub shows them.

    python notebooks/regenerate.py                        # every notebook
    python notebooks/regenerate.py 03 04                  # some of them (name, prefix or path)

Each notebook runs top to bottom on a kernel that uses this interpreter (``sys.executable``),
with a fresh namespace: two kernels run the notebooks, each starting its embedded Spark
once, with the first notebook it runs (see ``execute_all``). The outputs are written back
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


# Run in a kernel between two notebooks, so that the second starts as on a fresh kernel: the
# user's names gone (``%reset``), and the process-wide settings a notebook may change put
# back as they were before the first ran (pandas' display options, matplotlib's rcParams,
# open figures). What stays is what a notebook cannot see: imported modules and the running
# SparkSession, which the next notebook's first run uses instead of starting Spark again.
_FRESH_START = """
import matplotlib as _mpl
import matplotlib.pyplot as _plt  # the inline backend sets its rcParams as pyplot loads
_mpl._sparkbeam_fresh_rc = _mpl.rcParams.copy()
del _mpl, _plt
"""
_FRESH_NAMESPACE = """
import sys as _sys
import warnings as _warnings
import matplotlib as _mpl
import matplotlib.pyplot as _plt
_plt.close("all")
_KEEP = ("backend", "backend_fallback", "interactive")  # the inline backend's, kept as it runs
_mpl.rcParams.update({k: v for k, v in _mpl._sparkbeam_fresh_rc.items() if k not in _KEEP})
if "pandas" in _sys.modules:
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        _sys.modules["pandas"].reset_option("all")
del _KEEP
get_ipython().run_line_magic("reset", "-f")
"""


def _run(km: Any, nb: Any) -> Any:
    """``nb`` executed on the kernel of ``km`` (started here if it is not running); raises
    on the first failing cell."""
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        return client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()


def _run_hidden(km: Any, source: str) -> None:
    _run(km, nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]))


def execute(path: Path) -> Any:
    """The notebook at ``path`` executed on a fresh kernel; raises on the first failing cell."""
    import queue

    work: Any = queue.SimpleQueue()
    work.put(path)
    executed = _execute_in_one_kernel(work)[path]
    if isinstance(executed, Exception):
        raise executed
    return executed


def _execute_in_one_kernel(work: Any) -> dict[Path, Any]:
    """The notebooks taken from the queue ``work`` until it is empty, executed one after
    another on one kernel, each on a fresh namespace (``_FRESH_NAMESPACE``): per path, the
    executed notebook or the exception it raised. After a failure the next notebook gets a
    new kernel, as the failed one may be left in any state."""
    import queue

    executed: dict[Path, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sparkbeam-kernels-") as kernels_dir:
        km = kernel_manager(kernels_dir)
        try:
            while True:
                try:
                    path = work.get_nowait()
                except queue.Empty:
                    break
                try:
                    if km.has_kernel:
                        _run_hidden(km, _FRESH_NAMESPACE)
                    else:
                        _run_hidden(km, _FRESH_START)  # starts the kernel
                    executed[path] = _run(km, nbformat.read(path, as_version=4))
                except Exception as error:  # handed to the caller, per notebook
                    executed[path] = error
                    if km.has_kernel:
                        km.shutdown_kernel()
        finally:
            # nbclient leaves a kernel it did not create running; this one is ours to stop.
            if km.has_kernel:
                km.shutdown_kernel()
    return executed


def execute_all(paths: list[Path], at_once: int = 2) -> dict[Path, Any]:
    """Each notebook executed, ``at_once`` kernels at a time, each kernel taking the next
    notebook when it has finished one: per path, the executed notebook or the exception it
    raised.

    Each kernel starts Spark once, for the first notebook it runs; the notebooks after it
    run on a fresh namespace in that kernel (``_FRESH_NAMESPACE``) and use that Spark,
    which saves a kernel's and Spark's start-up and warm-up per notebook. A notebook's run
    waits on Spark's scheduling and the kernel's messages more than it computes, so two
    kernels take little longer than one on two cores.
    """
    import queue
    from concurrent.futures import ThreadPoolExecutor

    work: Any = queue.SimpleQueue()
    for path in paths:
        work.put(path)
    kernels = max(1, min(at_once, len(paths)))
    with ThreadPoolExecutor(max_workers=kernels) as pool:
        shares = list(pool.map(lambda _: _execute_in_one_kernel(work), range(kernels)))
    executed = {path: result for share in shares for path, result in share.items()}
    return {path: executed[path] for path in paths}


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
