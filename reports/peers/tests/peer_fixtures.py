"""What the peer tests share: the trainmem program they run (skipped, with the reason, when there is none).

Imported by name (`from peer_fixtures import trainmem`), not a conftest.py: reports/tests has the
conftest that `from conftest import ...` must find when both folders run in one pytest call."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.trainmem_program import TrainmemError, find_trainmem  # noqa: E402


@pytest.fixture(scope="module")
def trainmem() -> pathlib.Path:
    try:
        return find_trainmem()
    except TrainmemError as e:
        pytest.skip(str(e))
