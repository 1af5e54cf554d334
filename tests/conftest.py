import pytest


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
