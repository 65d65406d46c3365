"""A declared test dependency that is missing stops the run (tests/conftest.py), naming it."""

from __future__ import annotations

from tests.dependencies import INSTALL_COMMAND, declared_requirements, unmet_test_requirements


def test_the_test_extra_declares_what_the_tests_import():
    names = {requirement.name for requirement in declared_requirements()}
    assert {"apache-beam", "pandas", "matplotlib", "pyarrow", "nbclient", "hypothesis", "zstandard"} <= names


def test_this_environment_has_the_whole_test_extra():
    assert unmet_test_requirements() is None


def test_a_missing_or_excluded_package_is_named_with_the_install_command(tmp_path):
    setup_cfg = tmp_path / "setup.cfg"
    setup_cfg.write_text(
        "[options.extras_require]\n"
        "test =\n"
        "    pytest>=8\n"
        "    # a comment line is not a requirement\n"
        "    sparkbeam-no-such-package>=1\n"
        "    attrs<1\n"
        "    hypothesis; python_version < '3'\n"
    )
    message = unmet_test_requirements(setup_cfg)
    assert message is not None
    lines = message.splitlines()
    assert lines[1:] == [
        "  sparkbeam-no-such-package is not installed (declared: sparkbeam-no-such-package>=1)",
        lines[2],
        f"install it with: {INSTALL_COMMAND}",
    ]
    assert lines[2].startswith("  attrs ") and lines[2].endswith("is installed, but the test extra declares attrs<1")
