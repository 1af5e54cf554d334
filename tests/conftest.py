import pytest


@pytest.fixture(scope="session")
def tiny():
    from hista.models import load

    return load("tiny", device="cpu")
