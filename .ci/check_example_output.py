"""Checks what the README's first command printed: every hourly team total of the shipped
game log, computed here independently (plain Python over the CSV), and nothing else.

Usage: python .ci/check_example_output.py OUTPUT_FILE
"""

from __future__ import annotations

import collections
import datetime
import pathlib
import re
import sys

DATA = pathlib.Path(__file__).resolve().parents[1] / "sdk" / "examples" / "data" / "game_scores.csv"
ROW = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d)  (\S+)\s+(-?\d+)$")


def expected_rows() -> list[str]:
    totals: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in DATA.read_text().splitlines():
        parts = line.split(",")
        try:
            _user, team, score, timestamp_ms, _readable = parts
            seconds = int(timestamp_ms) / 1000.0
            points = int(score)
        except ValueError:
            continue  # the example sends such lines to its 'bad_lines' output
        hour = datetime.datetime.fromtimestamp(seconds - seconds % 3600, tz=datetime.timezone.utc)
        totals[(hour.strftime("%Y-%m-%d %H:%M"), team)] += points
    return sorted(f"{hour}  {team:<16} {total:>6}" for (hour, team), total in totals.items())


def main(path: str) -> int:
    printed = [line for line in pathlib.Path(path).read_text().splitlines() if ROW.match(line)]
    expected = expected_rows()
    if printed != expected:
        missing = sorted(set(expected) - set(printed))[:5]
        unexpected = sorted(set(printed) - set(expected))[:5]
        print(
            f"the example printed {len(printed)} hourly totals, expected {len(expected)}; "
            f"missing {missing}, unexpected {unexpected}",
            file=sys.stderr,
        )
        return 1
    print(f"the example printed all {len(expected)} hourly team totals, each as computed from {DATA.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
