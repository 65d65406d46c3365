"""A pytest plugin: Beam's ``userstate_test`` records its pipelines' outputs in a file, so that
its assertions can be checked on a runner whose DoFns run in other processes.

Beam's ``StatefulDoFnOnDirectRunnerTest`` collects what its pipelines output by appending
to a list on the test class (``all_records``), which only works when the DoFns run in the
test's own process. On sparkbeam's runner they run in Spark's Python workers, whose copy of
the class is not the test's (the README's conformance table counts those tests as failing
for that reason). With this plugin loaded as well::

    python -m pytest -p tests.beam_frontend.beam_suites -p tests.beam_frontend.beam_records \\
        -o addopts="" ".../apache_beam/transforms/userstate_test.py" \\
        --test-pipeline-options="--runner=sparkbeam.SparkRunner --state_partitions=2"

the recording DoFn appends each element to a file of the test's instead (the file's path
travels with the pickled DoFn), and ``all_records`` reads that file back, in the order the
elements were written. The pipelines and the assertions are Beam's, unchanged.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any


class FileRecords(list):
    """The elements appended to ``path``, read afresh on every use (a list to Beam's asserts)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def _read(self) -> list:
        found: list = []
        if not os.path.exists(self.path):
            return found
        with open(self.path, "rb") as records:
            while True:
                try:
                    found.append(pickle.load(records))
                except EOFError:
                    return found

    def __iter__(self) -> Any:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __getitem__(self, index: Any) -> Any:
        return self._read()[index]

    def __eq__(self, other: object) -> bool:
        return self._read() == other

    def __ne__(self, other: object) -> bool:
        return self._read() != other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._read())


def _record_dofn_class() -> type:
    import apache_beam as beam

    class AppendToFile(beam.DoFn):
        def __init__(self, path: str) -> None:
            self.path = path

        def process(self, element: Any) -> None:
            # One write per element, in append mode: writes of Spark's worker processes do not interleave.
            with open(self.path, "ab") as records:
                records.write(pickle.dumps(element))

    return AppendToFile


def pytest_configure(config: Any) -> None:
    try:
        from apache_beam.transforms import userstate_test
    except ImportError:  # Beam's test extra is not installed
        return
    test_class = userstate_test.StatefulDoFnOnDirectRunnerTest
    append_to_file = _record_dofn_class()
    directory = tempfile.mkdtemp(prefix="beam-records-")

    def set_up(self: Any) -> None:
        path = os.path.join(directory, f"{self.id()}.records")
        if os.path.exists(path):
            os.remove(path)
        test_class.all_records = FileRecords(path)

    def record_dofn(self: Any) -> Any:
        return append_to_file(test_class.all_records.path)

    test_class.setUp = set_up
    test_class.record_dofn = record_dofn
