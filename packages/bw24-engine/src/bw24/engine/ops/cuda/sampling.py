"""Device sampling (kernels/sample.cu): greedy and seeded draws, graph-capturable (no host sync).

The draw is keyed by (params.seed, pos[0]) with the same Philox4x32-10 as bw24.engine.sampling, and
the token is written to device memory; scratch is sized on the first (eager) call and reused.
"""

from __future__ import annotations

import numpy as np

from .weights import NULL

SAMPLE_THREADS = 1024  # one block; sample.cu's SNT
ARGMAX_THREADS = 256
ARGMAX_MAX_BLOCKS = 128  # partial (value, index) pairs reduced by argmax_sample's last block


def argmax_blocks(V: int) -> int:
    """Blocks of argmax_sample: ~8 logits per thread, at most ARGMAX_MAX_BLOCKS."""
    return max(1, min(ARGMAX_MAX_BLOCKS, -(-V // (8 * ARGMAX_THREADS))))


def _seed_words(seed: int) -> tuple[np.uint32, np.uint32]:
    s = int(seed)
    return np.uint32(s & 0xFFFFFFFF), np.uint32((s >> 32) & 0xFFFFFFFF)


def sample(ops, logits, params, pos, *, out, counts=None) -> None:
    """ops.sample for CudaOps: logits [V] float32, out int32 [1], counts int32 [V] or None."""
    lg = logits.reshape(-1)
    V = lg.size
    assert lg.dtype == np.float32 and lg.flags.c_contiguous and out.dtype == np.int32 and out.size == 1
    if counts is not None:
        assert counts.shape == (V,) and counts.dtype == np.int32
    use_counts = counts is not None and params.has_penalties
    pen = (np.float64(params.repetition_penalty), np.float64(params.frequency_penalty),
           np.float64(params.presence_penalty))
    if params.greedy:
        pv, pi = ops._buf("argmax_pv", ARGMAX_MAX_BLOCKS, np.float64), ops._buf("argmax_pi", ARGMAX_MAX_BLOCKS, np.int32)
        ticket = ops._buf("argmax_ticket", 1, np.uint32, zeroed=True)  # the last block re-arms it
        ops._launch(ops._k("sample.cu", "argmax_sample"), (argmax_blocks(V),), ARGMAX_THREADS,
                    (lg, np.int32(V), counts if use_counts else NULL, *pen, out, pv, pi, ticket))
    else:
        if params.seed is None:
            from ...errors import InvalidSamplingParamsError

            raise InvalidSamplingParamsError("sample() needs a concrete seed: call params.resolved() first")
        lo, hi = _seed_words(params.seed)
        s_lg, s_w = ops._buf("samp_lg", V, np.float64), ops._buf("samp_w", V, np.float64)
        s_key = ops._buf("samp_key", V, np.uint64)
        la, lb = ops._buf("samp_la", V, np.int32), ops._buf("samp_lb", V, np.int32)
        ops._launch(ops._k("sample.cu", "sample_dist"), (1,), SAMPLE_THREADS,
                    (lg, np.int32(V), counts if use_counts else NULL, *pen, np.float64(params.temperature),
                     np.int32(params.top_k), np.float64(params.top_p), np.float64(params.min_p), lo, hi, pos,
                     s_lg, s_w, s_key, la, lb, out))
    if counts is not None and not use_counts:
        ops._launch(ops._k("sample.cu", "count_token"), (1,), 32, (out, counts))


def uniforms(ops, seed: int, pos, n: int):
    """Device float64 [n]: sampling.uniform(seed, pos[0] + i) computed by the kernel (kernel_check)."""
    lo, hi = _seed_words(seed)
    res = ops.zeros((n,), np.float64)
    ops._launch(ops._k("sample.cu", "philox_uniform"), ((n + 127) // 128,), 128, (lo, hi, pos, np.int32(n), res))
    return res
