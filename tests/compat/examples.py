"""Beam's example pipelines and how each is driven: what its own tests do, on local files.

Inputs are the samples of the examples' own tests (``*_test.py`` beside each example).
Every driver works on either side; ``Side.sdk`` is apache_beam or sparkbeam, the same
module the example itself imported as ``beam``.
"""

from __future__ import annotations

import collections
import glob
import json
import pathlib
import re
import types
import unittest
from collections.abc import Callable
from typing import Any

from sparkbeam.beam_surface import UnsupportedBeamFeature
from tests.compat.harness import Example, Gap, Output, Side, assert_same, read_lines, tagged

EXAMPLES = "apache_beam.examples"

# The gaps, one per cause. Each names the exception sparkbeam raises today.
DATAFRAME = Gap(
    UnsupportedBeamFeature,
    r"apache_beam\.dataframe is not supported",
    "the DataFrame API (to_dataframe, DeferredDataFrame.to_csv) is not supported",
)
KEYS_BY_CODER = Gap(
    NotImplementedError,
    r"'CombinePerKey\(sum\)/GroupByKey' .* groups keys of type Player, whose instances compare by identity"
    r".* Beam by the bytes of its registered PlayerCoder",
    "keys of a class without __eq__/__hash__ (Player), which Beam groups by the bytes of their registered "
    "coder (PlayerCoder); sparkbeam groups keys by value and refuses such keys when the pipeline is built",
)


# --- wordcount -------------------------------------------------------------------------

WORDCOUNT_TEXT = "a b c a b a\nacento gráfico\nJuly 30, 2018\n\n aa bb cc aa bb aa"
DEBUGGING_TEXT = "xx yy Flourish\n zz Flourish Flourish stomach\n aa\n bb cc dd"


def text_in_text_out(entry: str, text: str, **run_keywords: Any) -> Callable[[types.ModuleType, Side], Output]:
    """Drive ``module.<entry>(argv)`` with ``--input`` a file of ``text`` and ``--output`` a prefix."""

    def drive(module: types.ModuleType, side: Side) -> Output:
        source = side.write_input("input.txt", text)
        output = side.output_prefix("result")
        getattr(module, entry)(side.args(input=source, output=output), **run_keywords)
        return read_lines(output + "*")

    return drive


def text_in_csv_files_out(entry: str, text: str) -> Callable[[types.ModuleType, Side], Output]:
    """As ``text_in_text_out``, for a CSV write: each file's first line is its header, kept
    apart as ``("header", line)``, for ``compare_csv_files``."""

    def drive(module: types.ModuleType, side: Side) -> Output:
        source = side.write_input("input.txt", text)
        output = side.output_prefix("result")
        getattr(module, entry)(side.args(input=source, output=output))
        lines: Output = collections.Counter()
        for path in glob.glob(output + "*"):
            file_lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
            lines.update(("header", line) if index == 0 else line for index, line in enumerate(file_lines))
        return lines

    return drive


def compare_csv_files(expected: Output, actual: Output) -> None:
    """The same rows, and every file headed by the same header. Beam's DataFrame ``to_csv``
    writes one file per bundle (``WriteToFiles`` unsharded), each starting with the header:
    Beam's FnApiRunner runs the test's input as one bundle, sparkbeam's runner as one per
    Spark partition (README: "Beam pipelines: a bundle is a Spark partition")."""
    assert_same(collections.Counter({line: n for line, n in expected.items() if isinstance(line, str)}),
                collections.Counter({line: n for line, n in actual.items() if isinstance(line, str)}))
    assert_same(collections.Counter({line for line in expected if not isinstance(line, str)}),
                collections.Counter({line for line in actual if not isinstance(line, str)}))


WORDCOUNT = [
    Example("wordcount", "wordcount", f"{EXAMPLES}.wordcount",
            text_in_text_out("run", WORDCOUNT_TEXT, save_main_session=False)),
    Example("wordcount", "wordcount_minimal", f"{EXAMPLES}.wordcount_minimal",
            text_in_text_out("main", WORDCOUNT_TEXT, save_main_session=False)),
    Example("wordcount", "wordcount_debugging", f"{EXAMPLES}.wordcount_debugging",
            text_in_text_out("run", DEBUGGING_TEXT, save_main_session=False)),
    Example("wordcount", "wordcount_with_metrics", f"{EXAMPLES}.wordcount_with_metrics",
            text_in_text_out("main", WORDCOUNT_TEXT, save_main_session=False)),
    # wordcount_dataframe.py only re-exports this module's run.
    Example("wordcount", "wordcount_dataframe", f"{EXAMPLES}.dataframe.wordcount",
            text_in_csv_files_out("run", WORDCOUNT_TEXT), gap=DATAFRAME, compare=compare_csv_files),
]


# --- complete/game ---------------------------------------------------------------------

GAME_EVENTS = "\n".join([
    "user1_team1,team1,18,1447686663000,2015-11-16 15:11:03.921",
    "user1_team1,team1,18,1447690263000,2015-11-16 16:11:03.921",
    "user2_team2,team2,2,1447690263000,2015-11-16 16:11:03.955",
    "user3_team3,team3,8,1447690263000,2015-11-16 16:11:03.955",
    "user4_team3,team3,5,1447690263000,2015-11-16 16:11:03.959",
    "user1_team1,team1,14,1447697463000,2015-11-16 18:11:03.955",
    "robot1_team1,team1,9000,1447697463000,2015-11-16 18:11:03.955",
    "robot2_team2,team2,1,1447697463000,2015-11-16 20:11:03.955",
    "robot2_team2,team2,9000,1447697463000,2015-11-16 21:11:03.955",
    "not,a,valid,event",
])


def game_events(module: types.ModuleType, side: Side, p: Any) -> Any:
    """The game log read from a local file (in place of Pub/Sub), parsed and stamped with
    each event's time, as the leader_board and game_stats tests build their input."""
    beam = side.sdk
    return (
        p
        | "ReadEvents" >> beam.io.ReadFromText(side.write_input("game.csv", GAME_EVENTS))
        | "Parse" >> beam.ParDo(module.ParseGameEventFn())
        | "Stamp" >> beam.Map(lambda event: beam.window.TimestampedValue(event, event["timestamp"]))
    )


def drive_user_score(module: types.ModuleType, side: Side) -> Output:
    output = side.output_prefix("user_scores")
    module.run(side.args(input=side.write_input("game.csv", GAME_EVENTS), output=output), save_main_session=False)
    return read_lines(output + "*")


def drive_hourly_team_score(module: types.ModuleType, side: Side) -> Output:
    # run() writes to BigQuery: its transform is driven from the local file instead.
    def build(p: Any) -> Any:
        return (
            p
            | side.sdk.io.ReadFromText(side.write_input("game.csv", GAME_EVENTS))
            | module.HourlyTeamScore(start_min="2015-11-16-15-20", stop_min="2015-11-16-17-20", window_duration=60)
        )

    return side.collect(build)


def drive_leader_board(module: types.ModuleType, side: Side) -> Output:
    # run() reads Pub/Sub and writes BigQuery: its transforms are driven from the local file.
    def build(p: Any) -> Any:
        events = game_events(module, side, p)
        return {
            "teams": events | module.CalculateTeamScores(team_window_duration=60, allowed_lateness=120),
            "users": events | module.CalculateUserScores(allowed_lateness=120),
        }

    return side.collect(build)


def compare_leader_boards(expected: Output, actual: Output) -> None:
    """Team scores as Beam's. User scores: Beam's Repeatedly(AfterCount(10)) in the global
    window never fires on nine events, so Beam outputs nothing (its test asserts that);
    sparkbeam emits what is still pending when the global window is collected, one final
    pane per user with the user's total (README: "Garbage collection")."""
    assert_same(collections.Counter({r: n for r, n in expected.items() if r[0] == "teams"}),
                collections.Counter({r: n for r, n in actual.items() if r[0] == "teams"}))
    beam_users = [record for record in expected.elements() if record[0] == "users"]
    if beam_users:
        msg = f"Beam's user scores should be empty, as its test asserts: {beam_users!r}"
        raise AssertionError(msg)
    totals: collections.Counter = collections.Counter()
    for line in GAME_EVENTS.splitlines():
        user, _team, score, *_ = line.split(",")
        if score.isdigit():
            totals[user] += int(score)
    ours = {(record[1], record[3], record[4][1]) for record in actual.elements() if record[0] == "users"}
    final_panes = {((user, total), "global", True) for user, total in totals.items()}
    if ours != final_panes:
        msg = f"sparkbeam's user scores should be one final pane per user with its total: {sorted(ours)!r}"
        raise AssertionError(msg)


def drive_game_stats(module: types.ModuleType, side: Side) -> Output:
    # run() reads Pub/Sub and writes BigQuery: its transforms are driven as its tests do.
    beam = side.sdk

    def build(p: Any) -> Any:
        user_scores = game_events(module, side, p) | beam.Map(lambda event: (event["user"], event["score"]))
        sessions = (
            user_scores
            | "WindowIntoSessions" >> beam.WindowInto(
                beam.window.Sessions(5 * 60), timestamp_combiner=beam.window.TimestampCombiner.OUTPUT_AT_EOW)
            | beam.CombinePerKey(lambda _: None)
            | beam.ParDo(module.UserSessionActivity())
            | "WindowToExtractSessionMean" >> beam.WindowInto(beam.window.FixedWindows(30 * 60))
            | beam.CombineGlobally(beam.combiners.MeanCombineFn()).without_defaults()
        )
        return {"spammy": user_scores | module.CalculateSpammyUsers(), "sessions": sessions}

    return side.collect(build)


GAME = [
    Example("game", "user_score", f"{EXAMPLES}.complete.game.user_score", drive_user_score),
    Example("game", "hourly_team_score", f"{EXAMPLES}.complete.game.hourly_team_score", drive_hourly_team_score),
    Example("game", "leader_board", f"{EXAMPLES}.complete.game.leader_board", drive_leader_board,
            compare=compare_leader_boards),
    Example("game", "game_stats", f"{EXAMPLES}.complete.game.game_stats", drive_game_stats),
]


# --- cookbook --------------------------------------------------------------------------

MATCHES = [
    {"host": ["Germany", 1], "guest": ["Italy", 0]},
    {"host": ["Germany", 1], "guest": ["Brasil", 3]},
    {"host": ["Brasil", 1], "guest": ["Italy", 0]},
]


def drive_coders(module: types.ModuleType, side: Side) -> Output:
    source = side.write_input("matches.json", "\n".join(json.dumps(match) for match in MATCHES))
    output = side.output_prefix("points")
    module.run(side.args(input=source, output=output))
    return read_lines(output + "*")


def run_test_case(module: types.ModuleType, side: Side) -> Output:
    """Run the module's own unittest cases (for examples that are only a test module);
    the outcome of each test is the output."""
    outcomes: Output = collections.Counter()
    for test in unittest.defaultTestLoader.loadTestsFromModule(module):
        for case in test:
            result = unittest.TestResult()
            case.run(result)
            problems = [text for _, text in result.errors + result.failures]
            outcomes[(case.id().rsplit(".", 1)[-1], "ok" if not problems else "\n".join(problems))] += 1
    return outcomes


def drive_custom_ptransform(module: types.ModuleType, side: Side) -> Output:
    source = side.write_input("animals.txt", "\n".join(["CAT", "DOG", "CAT", "CAT", "DOG"]))
    results = {}
    for count in ("run_count1", "run_count2", "run_count3"):
        output = side.output_prefix(count)
        known_args, pipeline_args = module.get_args(side.args(input=source, output=output))
        getattr(module, count)(known_args, module.PipelineOptions(pipeline_args))
        results[count] = read_lines(output + "*")
    return tagged(results)


WEATHER = [
    {"year": 2010, "month": 1, "day": 1, "mean_temp": 3, "removed": "a"},
    {"year": 2012, "month": 1, "day": 2, "mean_temp": 3, "removed": "a"},
    {"year": 2011, "month": 1, "day": 3, "mean_temp": 5, "removed": "a"},
    {"year": 2013, "month": 2, "day": 1, "mean_temp": 3, "removed": "a"},
    {"year": 2011, "month": 3, "day": 3, "mean_temp": 5, "removed": "a"},
]


def drive_filters(module: types.ModuleType, side: Side) -> Output:
    # run() reads and writes BigQuery: filter_cold_days is driven as its tests do, for a
    # month with cold days, one without and one absent from the data.
    beam = side.sdk

    def build(p: Any) -> Any:
        rows = p | beam.Create(WEATHER)
        return {
            f"month{month}": rows | f"Month{month}" >> beam.ptransform_fn(
                lambda pcoll, month=month: module.filter_cold_days(pcoll, month))()
            for month in (1, 3, 4)
        }

    return side.collect(build)


PLAYERS = ["joe,10", "fred,3", "mary,7", "joe,20", "fred,6", "ann,5", "joe,30", "ann,10", "mary,1"]


def drive_group_with_coder(module: types.ModuleType, side: Side) -> Output:
    output = side.output_prefix("totals")
    module.run(side.args(input=side.write_input("players.txt", "\n".join(PLAYERS)), output=output), save_main_session=False)
    return read_lines(output + "*")


CONTACTS = {
    "email": [
        "Nathan Nomad\tnathan@example.com", "Nicky Nomad\tnicky@example.com",
        "Noreen Nomad\tnoreen@example.com", "Noreen Nomad\tnomad@example.com",
        "Robert B\trobert@example.com", "Silviu C\tsilviu@example.com", "Tom S\ttom@example.com",
        "Wally Writer\twally@example.com",
    ],
    "phone": [
        "Larry Luddite\t724-228-3529", "Lisa Luddite\t304-277-3504", "Nathan Nomad\t412-466-8968",
        "Nicky Nomad\t724-379-5815", "Noreen Nomad\t412-472-0145", "Robert B\t814-865-8799",
        "Silviu C\t724-537-0671", "Tom S\t570-368-3420", "Tom S\t814-793-9655",
    ],
    "snailmail": [
        "Larry Luddite\t1949 Westcott St, Detroit, MI 48222", "Lisa Luddite\t1949 Westcott St, Detroit, MI 48222",
        "Robert B\t601 N 34th St, Seattle, WA 98103", "Silviu C\t1600 Amphitheatre Pkwy, Mountain View, CA 94043",
        "Tom S\t6425 Penn Ave Ste 700, Pittsburgh, PA 15206", "Wally Writer\t101 Ridge Rd, Chalkyitsik, AK 99788",
    ],
}


def sorted_tsv_lists(line: str) -> str:
    """A merged contact with its emails and phones sorted: grouping does not order them
    (the example's test normalises the same way)."""
    name, email, phone, snailmail = line.split("\t")
    resorted = ['"' + ",".join(sorted(field.strip('"').split(","))) + '"' for field in (email, phone)]
    return "\t".join([name, *resorted, snailmail])


def drive_mergecontacts(module: types.ModuleType, side: Side) -> Output:
    inputs = {f"input_{kind}": side.write_input(f"{kind}.tsv", "\n".join(lines) + "\n") for kind, lines in CONTACTS.items()}
    output = side.output_prefix("merged")
    module.run(
        side.args(**inputs, output_tsv=output + ".tsv", output_stats=output + ".stats"),
        assert_results=(2, 1, 3), save_main_session=False,
    )
    return collections.Counter(sorted_tsv_lists(line) for line in read_lines(output + ".tsv*").elements())


def drive_multiple_output_pardo(module: types.ModuleType, side: Side) -> Output:
    output = side.output_prefix("result")
    source = side.write_input("world.txt", "A whole new world\nA new fantastic point of view")
    module.run(side.args(input=source, output=output), save_main_session=False)
    return tagged({part: read_lines(f"{output}-{part}-*") for part in ("chars", "short-words", "words")})


def drive_bigquery_tornadoes(module: types.ModuleType, side: Side) -> Output:
    # run() reads and writes BigQuery: count_tornadoes is driven as its test does.
    rows = [
        {"month": 1, "day": 1, "tornado": False}, {"month": 1, "day": 2, "tornado": True},
        {"month": 1, "day": 3, "tornado": True}, {"month": 2, "day": 1, "tornado": True},
    ]
    return side.collect(lambda p: module.count_tornadoes(p | side.sdk.Create(rows)))


def drive_bigquery_side_input(module: types.ModuleType, side: Side) -> Output:
    # run() reads BigQuery: create_groups is driven as its test does.
    beam = side.sdk

    def build(p: Any) -> Any:
        return module.create_groups(
            p | "CreateGroupIds" >> beam.Create(["A", "B", "C"]),
            p | "CreateCorpus" >> beam.Create([{"f": "corpus1"}, {"f": "corpus2"}]),
            p | "CreateWords" >> beam.Create([{"f": "word1"}, {"f": "word2"}]),
            p | "CreateIgnoreCorpus" >> beam.Create(["corpus1"]),
            p | "CreateIgnoreWord" >> beam.Create(["word1"]),
        )

    return side.collect(build)


def drive_ordered_window_elements(module: types.ModuleType, side: Side) -> Output:
    # Its batch test's cases (default, offset, slide interval), on Beam's FnApiRunner
    # rather than Prism; windows and event times as whole seconds, as the test compares them.
    beam = side.sdk

    def seconds(window_and_elements: Any) -> Any:
        (start, end), elements = window_and_elements
        return (int(start.micros // 1e6), int(end.micros // 1e6)), [(int(t.micros // 1e6), v) for t, v in elements]

    def build(p: Any) -> Any:
        events = p | beam.Create([(beam.utils.timestamp.Timestamp.of(e), e) for e in range(10)])
        cases = {
            "default": module.OrderedWindowElements(3),
            "offset": module.OrderedWindowElements(3, offset=2),
            "sliding": module.OrderedWindowElements(3, slide_interval=1),
        }
        return {name: events | name >> transform | f"Seconds{name}" >> beam.Map(seconds) for name, transform in cases.items()}

    return side.collect(build)


COOKBOOK = [
    Example("cookbook", "coders", f"{EXAMPLES}.cookbook.coders", drive_coders),
    Example("cookbook", "combiners", f"{EXAMPLES}.cookbook.combiners_test", run_test_case),
    Example("cookbook", "custom_ptransform", f"{EXAMPLES}.cookbook.custom_ptransform", drive_custom_ptransform),
    Example("cookbook", "filters", f"{EXAMPLES}.cookbook.filters", drive_filters),
    Example("cookbook", "group_with_coder", f"{EXAMPLES}.cookbook.group_with_coder", drive_group_with_coder,
            gap=KEYS_BY_CODER),
    Example("cookbook", "mergecontacts", f"{EXAMPLES}.cookbook.mergecontacts", drive_mergecontacts),
    Example("cookbook", "multiple_output_pardo", f"{EXAMPLES}.cookbook.multiple_output_pardo", drive_multiple_output_pardo),
    Example("cookbook", "bigquery_tornadoes", f"{EXAMPLES}.cookbook.bigquery_tornadoes", drive_bigquery_tornadoes),
    Example("cookbook", "bigquery_side_input", f"{EXAMPLES}.cookbook.bigquery_side_input", drive_bigquery_side_input),
    Example("cookbook", "ordered_window_elements_batch", f"{EXAMPLES}.cookbook.ordered_window_elements.batch",
            drive_ordered_window_elements),
]


# --- complete --------------------------------------------------------------------------

AUTOCOMPLETE_TEXT = "this this that to to to\nthe theory of tea, then toast\nto be or not to be"


def drive_estimate_pi(module: types.ModuleType, side: Side) -> Output:
    # The estimate is random: its test checks the total and the estimate's range.
    return side.collect(lambda p: p | "Estimate" >> module.EstimatePiTransform(5000))


def compare_pi_estimates(expected: Output, actual: Output) -> None:
    """Both runs made 100 x 5000 trials in one result, and both estimates are within the
    bounds of the example's test."""
    for side, output in (("Beam", expected), ("sparkbeam", actual)):
        values = [record[0] for record in output.elements()]
        if len(values) != 1:
            msg = f"{side} should output one estimate, got {values!r}"
            raise AssertionError(msg)
        total, _inside, estimate = values[0]
        if total != 100 * 5000 or not 3.125 <= estimate <= 3.155:
            msg = f"{side}'s estimate {values[0]!r} is not (500000, _, 3.125..3.155)"
            raise AssertionError(msg)
    (record_beam,), (record_ours,) = expected, actual
    if record_beam[1:] != record_ours[1:]:
        msg = f"timestamp, window or pane differ: Beam {record_beam!r}, sparkbeam {record_ours!r}"
        raise AssertionError(msg)


def drive_tfidf(module: types.ModuleType, side: Side) -> Output:
    for name, text in (("1.txt", "abc def ghi"), ("2.txt", "abc def"), ("3.txt", "abc")):
        side.write_input(f"tfidf/{name}", text)
    output = side.output_prefix("tfidf")
    module.run(side.args(uris=str(side.inputs / "tfidf" / "*.txt"), output=output), save_main_session=False)
    return read_lines(output + "*")


WIKIPEDIA_EDITS = [
    {"timestamp": 0.0, "contributor_username": "user1"},
    {"timestamp": 0.001, "contributor_username": "user1"},
    {"timestamp": 0.002, "contributor_username": "user1"},
    {"timestamp": 0.0, "contributor_username": "user2"},
    {"timestamp": 0.001, "contributor_username": "user2"},
    {"timestamp": 3.601, "contributor_username": "user2"},
    {"timestamp": 3.602, "contributor_username": "user2"},
    {"timestamp": 2 * 3600.0, "contributor_username": "user2"},
    {"timestamp": 35 * 24 * 3.600, "contributor_username": "user3"},
    {"timestamp": 40 * 24 * 3600.0, "contributor_username": "user3"},
]


def drive_top_wikipedia_sessions(module: types.ModuleType, side: Side) -> Output:
    source = side.write_input("edits.json", "\n".join(json.dumps(edit) for edit in WIKIPEDIA_EDITS))
    output = side.output_prefix("sessions")
    module.run([*side.args(input=source, output=output), "--sampling_threshold=1.0"])
    return read_lines(output + "*")


# Three of its test's five crops (the fewest it takes): 18 mappings to optimise, not 162.
# Transport costs differ per greenhouse, so that exactly one mapping is optimal (equal costs
# make the winner depend on the order Top sees its ties in, which neither runner fixes).
DISTRIBOPT_INPUT = "OP01,8,12,0,13\nOP02,30,14,3,12\nOP03,25,7,3,14"


def drive_distribopt(module: types.ModuleType, side: Side) -> Output:
    output = side.output_prefix("optimum")
    module.run(side.args(input=side.write_input("crops.csv", DISTRIBOPT_INPUT), output=output), save_main_session=False)
    return read_lines(output + "*")


def drive_juliaset(module: types.ModuleType, side: Side) -> Output:
    output = side.output_prefix("coordinates")
    module.run([f"--coordinate_output={output}", "--grid_size=12", *side.pipeline_args])
    # One line per x: its (x, y, i) points in grouping order, which is unspecified.
    return collections.Counter(
        " ".join(sorted(re.findall(r"\(\d+, \d+, \d+\)", line))) for line in read_lines(output + "*").elements()
    )


COMPLETE = [
    Example("complete", "autocomplete", f"{EXAMPLES}.complete.autocomplete", text_in_text_out("run", AUTOCOMPLETE_TEXT)),
    Example("complete", "estimate_pi", f"{EXAMPLES}.complete.estimate_pi", drive_estimate_pi, compare=compare_pi_estimates),
    Example("complete", "tfidf", f"{EXAMPLES}.complete.tfidf", drive_tfidf),
    Example("complete", "top_wikipedia_sessions", f"{EXAMPLES}.complete.top_wikipedia_sessions", drive_top_wikipedia_sessions),
    Example("complete", "distribopt", f"{EXAMPLES}.complete.distribopt", drive_distribopt),
    Example("complete", "juliaset", f"{EXAMPLES}.complete.juliaset.juliaset.juliaset", drive_juliaset),
]

ALL = [*WORDCOUNT, *GAME, *COOKBOOK, *COMPLETE]
