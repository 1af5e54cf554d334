"""Fixtures shared by the whole suite, and the suite's threads.

The README's test command runs the suite on pytest-xdist's workers, one per core (``-n auto`` in
pyproject.toml). Each worker then gets an equal share of the cores for torch and for the processes
its tests start (``OMP_NUM_THREADS``), so that two workers on two cores do not run four threads.
Tests that must share one worker (a module fixture many tests read, a timing test) say so with
``pytest.mark.xdist_group``.
"""

import os

import pytest


def pytest_configure(config):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
        os.environ["OMP_NUM_THREADS"] = threads
        os.environ["MKL_NUM_THREADS"] = threads
        import torch

        torch.set_num_threads(int(threads))


@pytest.fixture(scope="session")
def tiny():
    from hista.models import load

    return load("tiny", device="cpu")


@pytest.fixture(scope="module")
def one_thread():
    """One CPU thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``):
    the tiny model's matrices are small, and a second thread only waits."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
