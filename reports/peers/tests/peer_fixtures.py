"""What the peer tests share: the trainmem program they run (skipped, with the reason, when there is
none) and the token file both trainers read.

Imported by name (`from peer_fixtures import trainmem`), not a conftest.py: reports/tests has the
conftest that `from conftest import ...` must find when both folders run in one pytest call."""
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.trainmem_program import TrainmemError, find_trainmem, write_tokens  # noqa: E402

# How far trainmem's loss and PyTorch's may be apart on the same weights: 64 fp32 roundings of a loss
# of ln(256) (V = 256), 2.1e-5 (test_same_weights.py says why).
LOSS_TOLERANCE = 64 * 2.0**-24 * math.log(256)


@pytest.fixture(scope="module")
def trainmem() -> pathlib.Path:
    try:
        return find_trainmem()
    except TrainmemError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def tokens(trainmem, tmp_path_factory) -> pathlib.Path:
    """train's synthetic corpus (seed 1) as a .tok file."""
    return write_tokens(trainmem, "synthetic", tmp_path_factory.mktemp("data") / "corpus.tok", seed=1)
