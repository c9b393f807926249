"""The greedy fast path of the speculative loop: drafts go to the target's ids buffer on the device,
one verify per round replays the graph captured for its T = K+1, the row argmax runs on the device,
and the host reads 2T int32 (targets + the verified ids) once per round.

Taken when decoding is greedy without penalties (sampled mode keeps runner.py's host path), the
drafter can write its drafts (n-gram: host lookup through DeviceIO.write; draft model and MTP:
`propose_into`, device-only), and the verify is exact for the backend: batched on a backend that
declares `batch_rows_exact` (or when --verify batched forces it, the self-consistency gate then
judging), RowExactOps on the CPU (eager there; how the CPU tests run this loop).

Exactness is runner.py's: the emitted token after row i is the argmax of logits bit-identical to the
decode step's, with sampling.sample's tie rule (lowest index); acceptance is greedy_accept's.
"""

from __future__ import annotations

from collections.abc import Iterator

from .verify import greedy_accept


def drafter_on_device(drafter) -> bool:
    """n-gram (host drafts, written in one copy) or a drafter that writes its drafts on the device."""
    return getattr(drafter, "name", "") == "ngram" or callable(getattr(drafter, "propose_into", None))


def fast_rounds(dec, ctx: list[int], n: int, stop: set[int], clock) -> Iterator[int]:
    """Rounds until n tokens or the context is full; ctx (prompt + emitted, the first token included)
    is extended in place; dec.stats is updated as runner.generate does. clock() -> seconds since the
    prefill ended (stats.decode_s)."""
    m, d, st, fv = dec.model, dec.drafter, dec.stats, dec.fast
    ids = m.buf.ids  # [max_batch] int32 on the backend; verify row t reads ids[t]
    io = fv.io
    while st.n_generated < n and len(ctx) <= m.kv.n_ctx:
        k = min(dec.k.k, n - st.n_generated - 1, m.kv.n_ctx - len(ctx))
        if k > 0 and callable(getattr(d, "propose_into", None)):
            kd = d.propose_into(ctx, k, io, ids)  # ids[1 : 1 + kd] written on the device
            io.write(ids[0:1], [ctx[-1]])
        else:
            drafts = [int(t) for t in d.propose(ctx, k).tokens[:k]] if k > 0 else []
            kd = len(drafts)
            io.write(ids[: kd + 1], [ctx[-1], *drafts])
        targets, verified = fv.run(kd + 1)  # the round's only host sync
        drafts = verified[1:]
        j = greedy_accept(drafts, targets)
        emitted = drafts[:j] + [targets[j]]
        hidden = None
        if d.needs_hidden:  # the hidden rows of the kept positions (still in the target's buffers)
            hidden = m.ops.to_host(m.buf.view(kd + 1).h[: j + 1])
        m.kv.reset(len(ctx) + j)  # keep ctx (last now cached) + the accepted drafts
        if callable(getattr(d, "note_drafts", None)):
            d.note_drafts(drafts)
        ctx += emitted
        st.rounds += 1
        st.drafted += kd
        st.accepted += j
        st.k_trace.append(kd)
        dec.k.update(j, kd)
        d.rollback(ctx, hidden)
        for t in emitted:
            st.n_generated += 1
            st.decode_s = clock()
            yield t
            if t in stop or st.n_generated >= n:
                return
