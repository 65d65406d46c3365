"""``--help`` reaching ``PipelineOptions`` lists sparkbeam's options, grouped, with their
defaults, and exits 0; ``display_data()`` gives the settings in effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparkbeam.options.pipeline_options import PipelineOptions

GROUP_TITLES = ["Standard options:", "Spark options:", "Streaming options", "Accepted for compatibility with Beam"]


def sections(text: str) -> dict[str, str]:
    """--help's text split at its group titles: title -> the lines under it."""
    found: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        title = next((t for t in GROUP_TITLES if line.startswith(t)), None)
        if title is not None:
            current = title
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


@pytest.mark.parametrize("flags", [["--help"], ["-h"], ["--streaming", "--help"], ["--spark_master=local[2]", "-h"]])
def test_help_prints_grouped_options_with_defaults_and_exits_0(capsys, flags):
    with pytest.raises(SystemExit) as exit_:
        PipelineOptions(flags)
    assert exit_.value.code == 0
    by_group = sections(capsys.readouterr().out)
    assert list(by_group) == GROUP_TITLES
    assert "--spark_master MASTER" in by_group["Spark options:"]
    assert "(default: the master spark-submit was given, else an embedded local[*]" in by_group["Spark options:"].replace("\n      ", " ")
    assert "--[no_]streaming" in by_group["Standard options:"]
    assert "--checkpoint_interval N" in by_group["Streaming options"]
    assert "(default: 10)" in by_group["Streaming options"]
    assert "--[no_]available_now" in by_group["Streaming options"]
    assert "--[no_]save_main_session" in by_group["Accepted for compatibility with Beam"]


def test_help_lists_every_option_once_with_its_default():
    text = PipelineOptions.format_help(width=200)
    usages = [line.split()[0] for line in text.splitlines() if line.startswith("  --")]
    names = sorted(usage.removeprefix("--").removeprefix("[no_]") for usage in usages)
    assert names == sorted(PipelineOptions().get_all_options())
    explanations = [line for line in text.splitlines() if line.startswith("      ")]
    assert sum("(default: " in line for line in explanations) == len(names)


def test_display_data_shows_every_setting_in_effect():
    shown = PipelineOptions(["--checkpoint_interval=3"], streaming=True).display_data()
    assert shown["checkpoint_interval"] == 3  # given as a flag
    assert shown["streaming"] is True  # given as a keyword
    assert shown["spark_master"] is None  # the default: spark-submit's master, else local[*]
    assert shown["step_interval"] == 1.0


def run_python(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def test_a_script_passing_its_arguments_to_pipeline_options_shows_them_on_help(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "from sparkbeam.options.pipeline_options import PipelineOptions\n"
        "options = PipelineOptions(sys.argv[1:])\n"
        "print('ran anyway')\n"
    )
    completed = run_python(str(script), "--help")
    assert completed.returncode == 0, completed.stderr
    assert "ran anyway" not in completed.stdout
    assert list(sections(completed.stdout)) == GROUP_TITLES


def test_the_examples_show_their_own_flags_then_sparkbeam_s(tmp_path):
    completed = run_python("-m", "sparkbeam.examples.hourly_team_score", "--help", cwd=str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert out.index("--input INPUT") < out.index("sparkbeam pipeline options") < out.index("--spark_master MASTER")
    assert not os.listdir(tmp_path)  # nothing ran

    completed = run_python("-m", "sparkbeam.examples.streaming_systems", "--help", cwd=str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("Streaming Systems, chapter 3")
    assert list(sections(completed.stdout)) == GROUP_TITLES
