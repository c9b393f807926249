"""Decode as one graph: the step embedding -> layers -> logits -> sampled token, captured once and
replayed per token (ARCHITECTURE.md). Position and token live in device memory and are advanced by
kernels (ops.advance in the forward, ops.sample writing buf.ids), so the host only reads the 4-byte
token, and may queue several replays before reading (stop conditions are seen a few tokens late and
the extra tokens dropped).

greedy_decode() is the plain loop used by tests; Engine.generate and the perf bench run the same step through the
same StepQueue, queuing step n + 1 before the host waits for token n (BW24_DECODE_LAG, decode_lag()).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

from .sampling import SamplingParams

DECODE_LAG_ENV = "BW24_DECODE_LAG"


def decode_lag() -> int:
    """BW24_DECODE_LAG: decode steps queued past the token the host waits for. 1 (the default): step n + 1 is
    queued before the host reads token n, so the GPU does not idle while the host reads the token, wakes and
    queues the next replay (an H100 at 7f01f4c: back-to-back replays took 601 us a token for the 0.6B and the
    bench's wait-for-each-token loop 691 us; the 8B's d4096 2,607 against 2,652). 0: the host waits for each
    token before it queues the next step, as llama-bench does. The tokens are the same either way."""
    v = os.environ.get(DECODE_LAG_ENV, "1")
    if v not in ("0", "1"):
        raise ValueError(f"{DECODE_LAG_ENV}={v!r}: use 1 (the default: step n + 1 queued before the host reads "
                         "token n) or 0 (the host waits for each token before it queues the next step)")
    return int(v)


def decode_step(model, params: SamplingParams, counts=None, *, publish: bool = True):
    """The replayable step: one forward of buf.ids[0] at kv.pos, then sample into buf.ids[0] (counts: the context's
    token counts, which the sampler's penalties read and it updates), then publish that token into the backend's
    token ring where it has one (StepQueue reads it there; publish=False: a step whose token no host reads, as a
    draft model's, which feeds its tokens to the target on the device)."""
    ops, buf = model.ops, model.buf
    token, row = buf.view(1).ids, buf.logits[0]

    def step() -> None:
        model.forward(1, last_only=True)
        ops.sample(row, params, model.kv.pos, out=token, counts=counts)
        if publish:
            ops.publish_token(token, model.kv.pos)

    return step


class StepQueue:
    """Replays of a captured decode step and the host's reads of the tokens they sample, in order. push() queues
    one step (kv.reserve(1), then the replay: it feeds the token buffer's id and samples the next one into it) and a
    late read of that sample (ops.to_host_later); pop() waits for the oldest read alone. So the host may queue step
    n + 1 before it waits for token n. The tokens are the same however many are queued: only the host's waits move."""

    def __init__(self, model, run) -> None:
        self.ops, self.kv, self.run = model.ops, model.kv, run
        self.token = model.buf.view(1).ids
        self.reads: deque = deque()

    def __len__(self) -> int:
        return len(self.reads)

    def read(self) -> None:
        """Queue a read of the token buffer as the work queued so far leaves it (the prompt's sample: no step)."""
        self.reads.append(self.ops.to_host_later(self.token))

    def push(self) -> None:
        self.kv.reserve(1)
        ring = self.ops.token_ring
        if ring is None:
            self.run()
            self.read()
            return
        # BW24_TOKEN_RING=1: the step itself writes its token into the ring's slot for the position it leaves
        # (decode_step's publish_token), so no copy is queued between two replays; only an event
        slot = ring.arm(self.kv.n_past)
        self.run()
        self.reads.append(ring.later(slot))

    def pop(self) -> int:
        return int(self.reads.popleft()()[0])

    def run_steps(self, n: int, lag: int) -> list[int]:
        """n steps, the host waiting for each token once `lag` more steps are queued past it (0: before the next
        push); every token read, in order, reads already pending first."""
        out = []
        for _ in range(n):
            self.push()
            while len(self.reads) > lag:
                out.append(self.pop())
        while self.reads:
            out.append(self.pop())
        return out


def greedy_decode(model, prompt: Sequence[int], n: int, *, ahead: int | None = None) -> list[int]:
    """n greedy tokens after prompt from a fresh context. `ahead`: steps queued past the token the host waits
    for (None: decode_lag(); 0: the host waits for each token before it queues the next step). The tokens are
    identical for any ahead; only host waits change."""
    ops, kv, buf = model.ops, model.kv, model.buf
    params = SamplingParams()
    kv.reset()
    model.feed(list(prompt))
    ops.sample(buf.logits[0], params, kv.pos, out=buf.view(1).ids)
    run = ops.capture(decode_step(model, params), keys=lambda: kv.n_past)  # (BW24_ATTN_DEPTH's class)
    q = StepQueue(model, run)
    q.read()  # the prompt's sample, then n - 1 steps
    return q.run_steps(n - 1, decode_lag() if ahead is None else ahead) if n > 0 else []
