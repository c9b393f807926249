"""L2 prefetch of the weights a decode step reads after its attention (BW24_L2_PREFETCH; kernels/common.cuh
l2_prefetch, issued by rope_kv).

Why: a decode step is memory-bound only inside its matvecs. Between the Q/K/V matvec and the gate/up one
run rope, the attention, its combine, wo and a norm: ~20 us a layer of the 8B at depth 0 in which HBM is
mostly idle (evidence/profile_h200_*: 3-5 us kernels, bound by latency). Weights asked into the L2 then
are read by the matvecs from there. The L2 (50 MiB on the H200) holds only part of a layer, so a budget
says how many bytes: the groups are taken in the order the step reads them (wo, gate, up, down, the next
layer's Q, K, V: a gate/up launch, qmv8_3 / qmv3, runs all of gate's blocks before up's), each group (weights read side by
side) the same fraction of every plane's rows, its first rows, which its first blocks read first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

ALIGN = 16  # cp.async.bulk.prefetch: address and size multiples of 16


def ranges(groups: Sequence[Sequence[tuple[int, int]]], budget: int) -> np.ndarray:
    """(address, bytes) planes per group -> int64 [n, 2] (address, bytes) prefixes within `budget` bytes.

    Group g gets fraction f = min(1, left / its bytes) of each plane (rounded down to 16 bytes), left being
    the budget its predecessors did not use; planes whose prefix is empty are dropped."""
    out: list[tuple[int, int]] = []
    left = int(budget)
    for planes in groups:
        total = sum(n for _, n in planes)
        if total == 0 or left < ALIGN:
            continue
        f = min(1.0, left / total)
        for ptr, n in planes:
            if ptr % ALIGN:
                raise ValueError(f"l2 prefetch: plane at {ptr:#x} is not {ALIGN}-byte aligned")
            take = int(n * f) // ALIGN * ALIGN
            if take:
                out.append((ptr, take))
                left -= take
    return np.array(out, np.int64).reshape(-1, 2)


def planes_of(weights: Sequence[Any]) -> list[tuple[int, int]]:
    """A group's device planes (QWeight.planes: cupy arrays) as (address, bytes)."""
    return [(int(p.data.ptr), int(p.nbytes)) for w in weights for p in w.planes.values()]


def table(cu, groups: Sequence[Sequence[Any]], budget: int) -> tuple[Any, int]:
    """The device table of `ranges` for these weight groups, built once by an eager step (uploading it
    allocates, which graph capture does not allow) and kept per (planes, budget): another model's weights,
    even at reused addresses, get their own."""
    planes = tuple(tuple(planes_of(g)) for g in groups)
    got = cu._l2_tables.get((planes, budget))
    if got is None:
        if cu._capturing:
            raise RuntimeError("an L2 prefetch table first needed inside graph capture: run the step eagerly first")
        r = ranges(planes, budget)
        with cu.stream:
            got = cu._l2_tables[(planes, budget)] = (cu.cp.asarray(r.ravel()), len(r))
    return got
