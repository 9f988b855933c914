import pytest

from fuzz.executor import Executor


@pytest.fixture(scope="session")
def executor():
    with Executor() as ex:
        yield ex
