"""One large CSV file through ``ReadFromCsvStream``: the time its write-ahead-log batch takes
and the driver JVM's heap meanwhile (in ``local[2]`` the executors' tasks run in it).

    python benchmarks/stream_intake.py --lines 3000000 10000000 [--driver_memory 4g]

Each size runs in a process of its own (a JVM's heap size is fixed when it starts): one file
of ``--lines`` lines ``key,value,second`` under a header, as ``state_at_scale.py stream``
writes its first file, read with ``--available_now`` and counted (every line must arrive).
Prints the log batch's seconds, the run's, the heap's peak (sampled every 0.2 s: live data
and garbage not yet collected) and its peak after a collection of the old generation (live
data; "-" when none ran: the heap never filled), or how the run ended if it failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

DAY = 86_400


def _write(path: str, lines: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("key,value,second\n")
        step = 1_000_000
        for start in range(0, lines, step):
            handle.writelines(f"k{n},{n % 1000},{n % DAY}\n" for n in range(start, min(lines, start + step)))


class _Heap:
    """The JVM's heap in use, sampled through its management beans."""

    def __init__(self, jvm: object) -> None:
        self.factory = jvm.java.lang.management.ManagementFactory  # type: ignore[attr-defined]
        self.peak = self.live = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        memory = self.factory.getMemoryMXBean()
        pools = [pool for pool in self.factory.getMemoryPoolMXBeans() if "Old Gen" in pool.getName()]
        while not self.done.wait(0.2):
            self.peak = max(self.peak, memory.getHeapMemoryUsage().getUsed())
            for pool in pools:
                after = pool.getCollectionUsage()
                if after is not None:
                    self.live = max(self.live, after.getUsed())

    def __enter__(self) -> _Heap:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()


def one(lines: int, driver_memory: str) -> dict:
    from pyspark.sql import SparkSession

    import sparkbeam as beam

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.hadoop.cloneConf", "true")
        .config("spark.driver.memory", driver_memory)
        .getOrCreate()
    )
    durable: list[float] = []

    class _Batches(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found = re.search(r"durable \((\d+) records\) in ([\d.]+)s", record.getMessage())
            if found and int(found.group(1)):
                durable.append(float(found.group(2)))

    intake_log = logging.getLogger("sparkbeam.runners.spark.intake")
    intake_log.setLevel(logging.DEBUG)
    intake_log.addHandler(_Batches())
    with tempfile.TemporaryDirectory(prefix="stream-intake-") as work:
        directory = os.path.join(work, "in")
        os.makedirs(directory)
        _write(os.path.join(directory, "batch-00000.csv"), lines)
        flags = ["--available_now", f"--checkpoint_dir={os.path.join(work, 'ck')}", "--quiet", "--state_partitions=2"]
        p = beam.Pipeline(options=beam.PipelineOptions(flags))
        counted = (
            p
            | beam.io.ReadFromCsvStream(directory, schema="key STRING, value INT, second LONG", timestamp=lambda row: row.second)
            | beam.Map(lambda row: ("lines", 1))
            | beam.CombinePerKey(sum)
        )
        captured = beam.capture(counted)
        started = time.perf_counter()
        with _Heap(spark.sparkContext._jvm) as heap:
            result = p.run()
        seconds = time.perf_counter() - started
        (total,) = [wv.value[1] for wv in result.emissions(captured)]
    return {
        "lines": lines,
        "read": total,
        "log_batch_s": round(sum(durable), 1),
        "run_s": round(seconds, 1),
        "heap_peak_mib": round(heap.peak / 2**20),
        "heap_live_mib": round(heap.live / 2**20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[3_000_000])
    parser.add_argument("--driver_memory", default="4g")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.lines[0], args.driver_memory)), flush=True)
        return
    print(f"{'lines':>11} {'read':>11} {'log batch s':>12} {'run s':>7} {'heap peak MiB':>14} {'live MiB':>9}   load {os.getloadavg()[0]:.1f}")
    for lines in args.lines:
        command = [sys.executable, __file__, "--one", "--lines", str(lines), "--driver_memory", args.driver_memory]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not found:
            errors = [line for line in done.stderr.splitlines() if "Error" in line or "Exception" in line]
            print(f"{lines:>11,} failed after {time.perf_counter() - started:.0f} s: {(errors or ['exit ' + str(done.returncode)])[0][:200]}")
            continue
        r = json.loads(found[0].removeprefix("RESULT "))
        live = r["heap_live_mib"] or "-"
        print(f"{r['lines']:>11,} {r['read']:>11,} {r['log_batch_s']:>12} {r['run_s']:>7} {r['heap_peak_mib']:>14} {live:>9}")


if __name__ == "__main__":
    main()
