"""trainmem_init.py's generator: std::mt19937_64 and libstdc++'s std::normal_distribution<float>,
to the bit (numpy only: these run in ci/test). That a whole model drawn this way is trainmem's is
test_same_weights.py's (the losses agree)."""
from __future__ import annotations

import pathlib
import sys

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed (ci/setup installs it)")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.trainmem_init import MT19937_64, initial_values, normals  # noqa: E402


def test_mt19937_64_is_the_standards():
    """[rand.predef]: the 10000th output of a default-constructed mt19937_64 (seed 5489)."""
    assert int(MT19937_64(5489).peek(10000)[-1]) == 9981545732273789042


def bits(values) -> list[str]:
    return [f"{v:08x}" for v in np.asarray(values, dtype=np.float32).view(np.uint32)]


def test_normals_are_libstdcxx_normal_distribution_float():
    """What `std::mt19937_64 rng(seed); std::normal_distribution<float> d(0, std); d(rng)` gives
    with GCC 12's libstdc++, as float bits: a distribution of 3 draws drops the 4th value of its
    second pair, and the next distribution starts on a fresh pair."""
    rng = MT19937_64(1)
    assert bits(normals(rng, 3, np.float32(0.02))) == ["bbfd839d", "ba4e91bb", "3c610eef"]
    assert bits(normals(rng, 5, np.float32(0.005))) == ["bb8246d9", "b98f40e5", "3c1ec1ad", "3ba3ff01", "3a1a08e7"]
    assert bits(normals(MT19937_64(42), 1, np.float32(0.02))) == ["3c6702b8"]


def test_initial_values_follow_the_table():
    """Ones and zeros draw nothing, padding rows draw nothing and stay 0, residual layers use
    0.02 / sqrt(2L) (in float): the draws are the same whatever sits between them."""
    table = [("wte.weight", (4, 2), "normal", 1), ("n.weight", (2,), "ones", 0), ("b.bias", (2,), "zeros", 0),
             ("p.weight", (2, 2), "residual", 0)]
    values = initial_values(table, layers=2, seed=1)
    rng = MT19937_64(1)
    assert bits(values["wte.weight"][:3].ravel()) == bits(normals(rng, 6, np.float32(0.02)))
    assert not values["wte.weight"][3].any()
    assert values["n.weight"].tolist() == [1, 1] and values["b.bias"].tolist() == [0, 0]
    std = np.float32(np.float32(0.02) / np.sqrt(np.float32(4)))
    assert bits(values["p.weight"].ravel()) == bits(normals(rng, 4, std))
