import pytest

from parityfuzz.executor import Executor


@pytest.fixture(scope="session")
def executor():
    with Executor() as ex:
        yield ex
