"""A pytest plugin that records each test's CPU seconds (issue 66): the test process's own CPU time
plus that of the child processes it waited for, over setup, call and teardown. Unlike a test's wall
time it hardly depends on what else runs on the machine, so a suite run beside other work still
says where the suite's cost lies.

    .venv/bin/python -m pytest -q -p suite_cpu --junitxml=runs/suite.xml   # with bench/ on PYTHONPATH
    python bench/suite_durations.py runs/suite.xml --cpu

The figure goes into the JUnit report as the test case's property ``cpu_s``.
"""

from __future__ import annotations

import resource
import time

import pytest


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_START] = _cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and _START in item.stash:  # before the report copies the properties
        item.user_properties.append(("cpu_s", f"{_cpu() - item.stash[_START]:.3f}"))
    yield


_START = pytest.StashKey[float]()
