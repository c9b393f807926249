"""KV cache: one [Hkv, S, D] key and [Hkv, S, Dv] value plane per layer, plus the position array.

`pos` (backend int32 [1]) is the number of tokens already cached; the forwards read it through ops
and advance it on the backend. `n_past` is its host-side mirror, kept by the host code that queues
steps (it never has to read the device to know it), and guards the context limit. `epoch` counts
resets, so a KVHistory can tell that other code has reset (and maybe refilled) the cache since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import BadInputError, ContextLimitError
from .ops.base import Ops

KV_DTYPES = {"f32": np.float32, "f16": np.float16}  # the KV-cache element, by the name users give


def kv_dtype(name: str, source: str = "kv_dtype") -> type:
    """The cache element for a name ("f32" | "f16"); a clear error naming the setting otherwise."""
    if name not in KV_DTYPES:
        raise BadInputError(f"{source}={name!r}: expected one of {sorted(KV_DTYPES)}")
    return KV_DTYPES[name]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVCache:
    def __init__(self, ops: Ops, n_layer: int, n_head_kv: int, head_dim: int, head_dim_v: int, n_ctx: int,
                 dtype: type | None = None):
        self.ops, self.n_ctx = ops, n_ctx
        # None: the backend's element (cuda float16 unless BW24_KV_DTYPE=f32; Engine.load(kv_dtype=))
        dt = getattr(ops, "kv_dtype", np.float32) if dtype is None else dtype
        self.k = [ops.zeros((n_head_kv, n_ctx, head_dim), dt) for _ in range(n_layer)]  # [Hkv, S, D]
        self.v = [ops.zeros((n_head_kv, n_ctx, head_dim_v), dt) for _ in range(n_layer)]  # [Hkv, S, Dv]
        self.pos = ops.zeros((1,), np.int32)
        self.n_past = 0
        self.epoch = 0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.k[0].dtype)

    def like(self, n_ctx: int, dtype: type) -> KVCache:
        """An empty cache of this one's layers and head shapes, n_ctx positions of `dtype`."""
        (hkv, _, d), dv = self.k[0].shape, self.v[0].shape[2]
        return KVCache(self.ops, len(self.k), hkv, d, dv, n_ctx, dtype)

    def round_to(self, dtype) -> None:
        """Every key and value rounded to dtype's grid, in place (the cache keeps its element)."""
        for a in (*self.k, *self.v):
            self.ops.round_to(a, dtype)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (*self.k, *self.v))

    def reset(self, n_past: int = 0) -> None:
        """Forget everything after the first n_past tokens (their keys stay valid)."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"reset to {n_past}: only {self.n_past} tokens are cached")
        # Device position and host mirror move together (copy_from_host is ordered on the backend's
        # stream, before any step queued after it).
        self.ops.copy_from_host(self.pos, np.array([n_past], np.int32))
        self.n_past = n_past
        self.epoch += 1

    def reserve(self, n: int) -> None:
        """Check that n more tokens fit, and account for them (call before queuing the step)."""
        if self.n_past + n > self.n_ctx:
            raise ContextLimitError(
                f"context limit exceeded: {self.n_past} cached + {n} new tokens > n_ctx={self.n_ctx}"
            )
        self.n_past += n


@dataclass
class KVHistory:
    """The token ids whose keys/values a KVCache holds, as written by the generation that owns it
    (epoch = the cache's epoch after that generation's reset). Valid only while the cache has not
    been reset since and holds exactly len(ids) tokens."""

    ids: list[int] = field(default_factory=list)
    epoch: int = -1

    def valid_for(self, kv: KVCache) -> bool:
        return self.epoch == kv.epoch and len(self.ids) == kv.n_past

    def reusable(self, kv: KVCache, prompt: Sequence[int]) -> int:
        """Prompt tokens whose KV can be kept: the common prefix, leaving at least the last prompt
        token to be fed (its logits start the generation); 0 when the record is stale."""
        if not prompt or not self.valid_for(kv):
            return 0
        return min(common_prefix(self.ids, prompt), len(prompt) - 1)
