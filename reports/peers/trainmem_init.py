"""trainmem's initial weights, drawn in Python as common/model/model.cpp draws them, so that the
PyTorch reference can start from the very weights trainmem starts from (same seed, same values,
to the bit) and the two losses can be compared step by step.

model.cpp: one std::mt19937_64 seeded with --seed; for every parameter of the table
(common/model/parameter_table.h, in its order) a fresh std::normal_distribution<float>(0, std),
std 0.02 or, for the residual projections, float(0.02f / sqrtf(2 L)); its first rows drawn one
value after the other (wte's and the head's V real rows; the Vp - V padding rows draw nothing and
stay 0); ones and zeros draw nothing.

The generator and the distribution are the C++ library's, reproduced here:
  mt19937_64  specified by the C++ standard ([rand.predef]: its 10000th output from the default
              seed is 9981545732273789042, checked by the tests);
  uniform     generate_canonical<float, 24>: one 64-bit output u, float(u) / 2^64 (round to
              nearest), 1 - 2^-24 in place of 1;
  normal      libstdc++'s (GCC's standard library) Marsaglia polar method: x = 2u1 - 1,
              y = 2u2 - 1 (in double, rounded to float), r2 = x x + y y, again while r2 > 1 or
              r2 == 0; m = sqrtf(-2 logf(r2) / r2); the values y m then x m (float), each times std.
              A distribution draws pairs: a parameter with an odd count drops its last value.
logf is the C library's (ctypes), the function trainmem's own calls; everything else is IEEE
float or double arithmetic that numpy does the same way. libc++ (clang's library) draws its
normals differently: `libstdcxx_linked` says whether a trainmem program uses libstdc++.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import pathlib
import subprocess

import numpy as np

_N, _M = 312, 156
_MATRIX = np.uint64(0xB5026F5AA96619E9)
_UPPER, _LOWER = np.uint64(0xFFFFFFFF80000000), np.uint64(0x7FFFFFFF)


class MT19937_64:
    """std::mt19937_64, outputs in blocks (numpy uint64)."""

    def __init__(self, seed: int):
        state = [seed & (2**64 - 1)]
        for i in range(1, _N):
            prev = state[-1]
            state.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & (2**64 - 1))
        self.state = np.array(state, dtype=np.uint64)
        self.buffer = np.empty(0, dtype=np.uint64)

    def _twist(self) -> None:
        x = self.state
        def mixed(i: slice, j: slice, k: np.ndarray) -> np.ndarray:  # x[i] from x[i], x[i + 1], x[i + m]
            y = (x[i] & _UPPER) | (x[j] & _LOWER)
            return k ^ (y >> np.uint64(1)) ^ np.where(y & np.uint64(1), _MATRIX, np.uint64(0))
        x[:_N - _M] = mixed(slice(0, _N - _M), slice(1, _N - _M + 1), x[_M:_N])
        x[_N - _M:_N - 1] = mixed(slice(_N - _M, _N - 1), slice(_N - _M + 1, _N), x[:_M - 1])
        x[_N - 1:] = mixed(slice(_N - 1, _N), slice(0, 1), x[_M - 1:_M])

    def _tempered(self) -> np.ndarray:
        y = self.state.copy()
        y ^= (y >> np.uint64(29)) & np.uint64(0x5555555555555555)
        y ^= (y << np.uint64(17)) & np.uint64(0x71D67FFFEDA60000)
        y ^= (y << np.uint64(37)) & np.uint64(0xFFF7EEE000000000)
        return y ^ (y >> np.uint64(43))

    def peek(self, count: int) -> np.ndarray:
        """The next `count` outputs, not consumed (skip consumes them)."""
        while len(self.buffer) < count:
            self._twist()
            self.buffer = np.concatenate([self.buffer, self._tempered()])
        return self.buffer[:count]

    def skip(self, count: int) -> None:
        self.peek(count)
        self.buffer = self.buffer[count:]


def _logf():
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.logf.restype, libm.logf.argtypes = ctypes.c_float, [ctypes.c_float]
    return libm.logf


def _canonical(u: np.ndarray) -> np.ndarray:
    """generate_canonical<float, 24>: float(u) / 2^64, below 1."""
    f = u.astype(np.float32) * np.float32(2.0**-64)
    return np.where(f >= 1, np.nextafter(np.float32(1), np.float32(0)), f).astype(np.float32)


def normals(rng: MT19937_64, count: int, std: np.float32, logf=None) -> np.ndarray:
    """`count` draws of one std::normal_distribution<float>(0, std) (libstdc++'s polar method)."""
    logf, pairs = logf or _logf(), (count + 1) // 2
    x, y = np.empty(0, np.float32), np.empty(0, np.float32)
    while len(x) < pairs:  # every try reads two outputs; the tries kept are those inside the circle
        wanted = pairs - len(x)
        u = _canonical(rng.peek(2 * (wanted + wanted // 4 + 16))).reshape(-1, 2)
        xy = (np.float32(2) * u).astype(np.float64) - 1.0
        tx, ty = xy[:, 0].astype(np.float32), xy[:, 1].astype(np.float32)
        r2 = tx * tx + ty * ty
        kept = np.flatnonzero((r2 <= 1.0) & (r2 != 0.0))[:wanted]
        rng.skip(2 * (kept[-1] + 1) if len(kept) == wanted else 2 * len(u))
        x, y = np.concatenate([x, tx[kept]]), np.concatenate([y, ty[kept]])
    r2 = x * x + y * y
    log = np.array([logf(float(v)) for v in r2], dtype=np.float32)
    m = np.sqrt(np.float32(-2) * log / r2)
    out = np.stack([y * m, x * m], axis=1).reshape(-1)[:count]
    return out * np.float32(std)


def parameter_table(model) -> list[tuple[str, tuple[int, ...], str, int]]:
    """A PyTorch model's parameters as parameter_table.h lists them: (module name, shape, init,
    padding rows), in the model's order, which is the table's (torch_gpt.py, torch_llama.py)."""
    padding = model.config.padded_vocab - model.config.vocab
    return [(name, tuple(p.shape), model.init_kind(name), padding if name in ("wte.weight", "head.weight") else 0)
            for name, p in model.named_parameters()]


def initial_values(table: list[tuple[str, tuple[int, ...], str, int]], layers: int, seed: int) -> dict[str, np.ndarray]:
    """The values model.cpp gives the parameters of `table` (parameter_table's rows, in order),
    init one of "normal", "residual", "ones", "zeros" (parameter_table.h's ParameterInit)."""
    rng, logf = MT19937_64(seed), _logf()
    residual_std = np.float32(np.float32(0.02) / np.sqrt(np.float32(2 * layers)))
    out = {}
    for name, shape, init, padding_rows in table:
        numel = math.prod(shape)
        values = np.zeros(numel, dtype=np.float32)
        if init == "ones":
            values[:] = 1
        elif init in ("normal", "residual"):
            drawn = numel - padding_rows * (numel // shape[0])
            values[:drawn] = normals(rng, drawn, residual_std if init == "residual" else np.float32(0.02), logf)
        out[name] = values.reshape(shape)
    return out


def set_trainmem_values(model, seed: int) -> None:
    """Gives a PyTorch model (fp32, on the CPU) the values trainmem --seed SEED starts from."""
    values = initial_values(parameter_table(model), model.config.layers, seed)
    for name, p in model.named_parameters():
        p.detach().numpy()[...] = values[name]


def libstdcxx_linked(trainmem: pathlib.Path) -> bool:
    """Whether the program uses GCC's libstdc++ (whose normal_distribution this file reproduces)."""
    ldd = subprocess.run(["ldd", str(trainmem)], capture_output=True, text=True)
    return "libstdc++" in ldd.stdout
