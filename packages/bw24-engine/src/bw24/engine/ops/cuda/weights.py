"""Device weights: repacked planes uploaded once (bw24.engine.ops.cuda.repack documents them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .repack import Planes, repack_parallel

NULL = np.uintp(0)  # a null pointer kernel argument (optional planes, bias, residual)


@dataclass(frozen=True, eq=False)
class QWeight:
    """A matrix [N, K] (or stacked experts [X, N, K], rows flattened to X*N) on the device."""

    name: str
    qtype: Any
    fmt: int
    shape: tuple[int, ...]
    n: int  # rows of the flattened matrix
    k: int
    planes: dict[str, Any]  # "a".."d" -> cupy arrays
    nbytes: int

    def args(self) -> tuple:
        return tuple(self.planes.get(p, NULL) for p in "abcd")


def upload_weight(name: str, raw: np.ndarray, qtype: Any, shape: tuple[int, ...], put) -> QWeight:
    """Repack on the host and upload each plane with `put(host_array) -> device array`.

    The repack of a big K-quant tensor runs on min(16, CPUs) threads ($BW24_REPACK_THREADS overrides; 1 = serial):
    single-threaded it dominated model load."""
    p: Planes = repack_parallel(raw, qtype, shape)
    dev = {k: put(v) for k, v in p.planes.items()}
    return QWeight(name, p.qtype, p.fmt, tuple(int(s) for s in shape), p.n, p.k, dev, p.nbytes)
