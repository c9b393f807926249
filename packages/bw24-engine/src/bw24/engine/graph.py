"""Decode as one graph: the step embedding -> layers -> logits -> sampled token, captured once and
replayed per token (ARCHITECTURE.md). Position and token live in device memory and are advanced by
kernels (ops.advance in the forward, ops.sample writing buf.ids), so the host only reads the 4-byte
token, and may queue several replays before reading (stop conditions are seen a few tokens late and
the extra tokens dropped).

greedy_decode() is the plain loop used by tests and benches; Engine.generate runs the same step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .sampling import SamplingParams


def decode_step(model, params: SamplingParams, counts=None):
    """The replayable step: one forward of buf.ids[0] at kv.pos, then sample into buf.ids[0]."""
    ops, buf = model.ops, model.buf
    token, row = buf.view(1).ids, buf.logits[0]

    def step() -> None:
        model.forward(1, last_only=True)
        ops.sample(row, params, model.kv.pos, out=token, counts=counts)

    return step


def greedy_decode(model, prompt: Sequence[int], n: int, *, ahead: int = 1) -> list[int]:
    """n greedy tokens after prompt from a fresh context. `ahead` replays are queued before the
    host reads their tokens (the tokens are identical for any ahead; only host waits change)."""
    ops, kv, buf = model.ops, model.kv, model.buf
    params = SamplingParams()
    kv.reset()
    model.feed(list(prompt))
    token = buf.view(1).ids
    ops.sample(buf.logits[0], params, kv.pos, out=token)
    run = ops.capture(decode_step(model, params), keys=lambda: kv.n_past)  # (BW24_ATTN_DEPTH's class)
    out = [int(ops.to_host(token)[0])]
    hist = ops.zeros((max(n, 1),), np.int32) if ahead > 1 else None
    while len(out) < n:
        k = min(ahead, n - len(out))
        for i in range(k):
            kv.reserve(1)
            run()
            if hist is not None:
                ops.copy_device(hist[i:i + 1], token)
        if hist is None:
            out.append(int(ops.to_host(token)[0]))
        else:
            out.extend(int(t) for t in ops.to_host(hist[:k]))
    return out
