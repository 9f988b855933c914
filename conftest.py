"""The harness's own test options: the long forms CI leaves out for time (CI runs the README's test command, two
pytest-xdist processes, on a 2-core machine under its 30-minute limit; the long forms' figures are in their comments
and the issue notes)."""

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("parityfuzz")
    group.addoption(
        "--export-all", action="store_true", default=False,
        help="tests/test_export.py: run the exported script of every corpus file the export covers (CI: a sample)")
    group.addoption(
        "--long", action="store_true", default=False,
        help="also run the tests marked long: more fuzz seeds and slower end-to-end runs whose features CI "
             "covers by a shorter test")


def pytest_configure(config):
    config.addinivalue_line("markers", "long: a slower test CI leaves out (run with --long)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("long"):
        return
    long = [item for item in items if item.get_closest_marker("long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("long")]
