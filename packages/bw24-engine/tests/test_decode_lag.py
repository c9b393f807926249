"""BW24_DECODE_LAG (graph.StepQueue, generate.py): with step n + 1 queued before the host reads token n (1, the
default) a generation streams the same events as with the host waiting for each token (0), however it ends (max
tokens, a full context, a stop string, an end-of-generation token), and leaves the KV cache, its position and the
history record in step (the step queued past the end undone). Canaries: no undo, or a read that waits for the
later step, turn these checks red. CPU (smollm2-135m on the reference backend): the loop's order is the engine's on
every backend; test_cuda_gpu.py runs the same loop's pinned reads on a GPU.

BW24_TOKEN_RING (ops/cuda/readback.py TokenRing): the step writes its token into a ring slot a position and the
host reads the slot instead of a copy. Its protocol runs here on the reference backend, the slot written by the
step's publish_token as the CUDA kernel writes it; a step that publishes nothing, or into the wrong slot, is
caught. The CUDA test below runs the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine import Engine, SamplingParams
from bw24.engine import generate as generate_mod
from bw24.engine.generate import generate
from bw24.engine.graph import DECODE_LAG_ENV, decode_lag
from bw24.engine.kv_cache import KVHistory

N_CTX = 24


@pytest.fixture(scope="module")
def eng():
    return Engine.load("smollm2-135m", backend="cpu", n_ctx=N_CTX, progress=False)


@pytest.fixture(scope="module")
def prompt(eng):
    return eng.tokenizer.encode("The three primary colors are", add_special=True)


class EndsAt:
    """The model's tokenizer with `end` as its only end-of-generation id (an EOS at a known place)."""

    def __init__(self, tok, end: int):
        self._tok, self.eot_ids, self.eos_id = tok, (end,), None

    def __getattr__(self, name):
        return getattr(self._tok, name)


def run(eng, prompt, lag: int, monkeypatch, *, end: int | None = None, **kw):
    """(events, history) of one greedy generation from a fresh context with BW24_DECODE_LAG=lag."""
    from bw24.tokenizer import IncrementalDetokenizer

    monkeypatch.setenv(DECODE_LAG_ENV, str(lag))
    tok = eng.tokenizer if end is None else EndsAt(eng.tokenizer, end)
    hist = KVHistory()
    evs = [(e.token_id, e.text, e.finish_reason)
           for e in generate(eng.model, tok, IncrementalDetokenizer(eng.tokenizer), prompt, SamplingParams(),
                             history=hist, **kw)]
    return evs, hist


def assert_kv_in_step(eng, prompt, evs, hist) -> None:
    """What the cache holds: the prompt and every generated token but the last (never fed), on the host, on the
    backend and in the record."""
    kv = eng.model.kv
    want = list(prompt) + [t for t, _, _ in evs[:-1]]
    assert kv.n_past == len(want), f"the cache holds {kv.n_past} positions, {len(want)} were fed"
    assert int(np.asarray(eng.ops.to_host(kv.pos))[0]) == kv.n_past
    assert hist.valid_for(kv) and hist.ids == want


@pytest.fixture(scope="module")
def free_run(eng, prompt):
    """8 greedy tokens with nothing to stop them early (the reference for picking stops)."""
    mp = pytest.MonkeyPatch()
    try:
        evs, _ = run(eng, prompt, 0, mp, max_tokens=8)
    finally:
        mp.undo()
    return evs


def endings(free_run):
    toks = [t for t, _, _ in free_run]
    i = next(i for i in range(2, len(toks)) if toks[i] not in toks[:i])  # its first appearance
    text = free_run[3][1].strip()
    assert text, "the reference's 4th token has no text to stop on"
    return {"max_tokens": {"max_tokens": 6}, "context": {"max_tokens": 100},
            "stop string": {"max_tokens": 8, "stop": [text]}, "end token": {"max_tokens": 8, "end": toks[i]}}


@pytest.mark.parametrize("how", ["max_tokens", "context", "stop string", "end token"])
def test_lag_one_streams_the_same_events_and_keeps_the_cache_in_step(eng, prompt, free_run, monkeypatch, how):
    kw = endings(free_run)[how]
    evs0, hist0 = run(eng, prompt, 0, monkeypatch, **kw)
    assert_kv_in_step(eng, prompt, evs0, hist0)
    evs1, hist1 = run(eng, prompt, 1, monkeypatch, **kw)
    assert evs1 == evs0
    assert_kv_in_step(eng, prompt, evs1, hist1)
    expect = {"max_tokens": ("length", 6), "context": ("length", N_CTX - len(prompt) + 1)}.get(how)
    if expect is None:  # ended early, one step after the host had queued the next
        assert evs1[-1][2] == "stop" and len(evs1) < 8
    else:
        assert (evs1[-1][2], len(evs1)) == expect


def test_canary_a_queued_step_not_undone_is_caught(eng, prompt, free_run, monkeypatch):
    kw = endings(free_run)["end token"]
    monkeypatch.setattr(generate_mod, "drop_queued_step", lambda kv, past, history, mine: mine)
    evs, hist = run(eng, prompt, 1, monkeypatch, **kw)
    with pytest.raises(AssertionError, match="positions"):
        assert_kv_in_step(eng, prompt, evs, hist)


def test_canary_a_read_that_waits_for_the_later_step_is_caught(eng, prompt, monkeypatch):
    """A read taken when waited on (after step n + 1 overwrote the token buffer) instead of when queued."""
    ref, _ = run(eng, prompt, 0, monkeypatch, max_tokens=8)
    ops = eng.model.ops
    monkeypatch.setattr(ops, "to_host_later", lambda a: (lambda: ops.to_host(a)))
    bad, _ = run(eng, prompt, 1, monkeypatch, max_tokens=8)
    assert [t for t, _, _ in bad] != [t for t, _, _ in ref]


def host_ring(ops, monkeypatch, *, n: int = 8, shift: int = 0, publish: bool = True):
    """BW24_TOKEN_RING's protocol on the reference backend: a TokenRing of host slots (n of them, so a generation
    wraps it) that the step's publish_token fills as kernels/readback.cu does: slot = the position the step leaves
    (+ shift: a canary's wrong slot); publish=False: a step that writes no token."""
    from bw24.engine.ops.cuda.readback import TokenRing

    ring = TokenRing(np.empty(n, np.int32))

    def put(token, pos):
        ring.host[(int(np.asarray(ops.to_host(pos))[0]) + shift) % n] = int(np.asarray(ops.to_host(token))[0])

    monkeypatch.setattr(ops, "token_ring", ring, raising=False)
    monkeypatch.setattr(ops, "publish_token", put if publish else (lambda token, pos: None))
    return ring


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("how", ["max_tokens", "context", "stop string", "end token"])
def test_token_ring_streams_the_same_events(eng, prompt, free_run, monkeypatch, how, lag):
    kw = endings(free_run)[how]
    ref, _ = run(eng, prompt, lag, monkeypatch, **kw)
    ring = host_ring(eng.model.ops, monkeypatch)
    evs, hist = run(eng, prompt, lag, monkeypatch, **kw)
    assert evs == ref
    assert_kv_in_step(eng, prompt, evs, hist)
    # every token but the prompt's sample came through the ring (at lag 1 maybe one step more, queued past the end)
    assert len(evs) - 1 <= ring.serial <= len(evs) - 1 + lag


def test_token_ring_greedy_decode_matches(eng, prompt, monkeypatch):
    from bw24.engine.graph import greedy_decode

    ref = greedy_decode(eng.model, prompt, 12, ahead=0)
    host_ring(eng.model.ops, monkeypatch, n=4)
    assert greedy_decode(eng.model, prompt, 12, ahead=1) == greedy_decode(eng.model, prompt, 12, ahead=0) == ref


def test_canary_a_step_that_publishes_no_token_raises(eng, prompt, monkeypatch):
    host_ring(eng.model.ops, monkeypatch, publish=False)
    with pytest.raises(RuntimeError, match="still unset"):
        run(eng, prompt, 1, monkeypatch, max_tokens=8)


def test_canary_a_token_in_the_wrong_slot_is_caught(eng, prompt, monkeypatch):
    """Published one slot late: each read finds the slot unset, or a token of another position."""
    ref, _ = run(eng, prompt, 1, monkeypatch, max_tokens=8)
    host_ring(eng.model.ops, monkeypatch, shift=1)
    try:
        bad, _ = run(eng, prompt, 1, monkeypatch, max_tokens=8)
    except RuntimeError as e:
        assert "still unset" in str(e)
    else:
        assert bad != ref


def test_token_ring_slot_reused_before_its_read_raises():
    from bw24.engine.ops.cuda.readback import TokenRing

    ring = TokenRing(np.empty(4, np.int32))
    first = ring.later(ring.arm(5))
    ring.host[1] = 7
    ring.later(ring.arm(9))  # the same slot, 4 positions on
    with pytest.raises(RuntimeError, match="later step took its slot"):
        first()


@pytest.mark.parametrize("bad", ["2", "on", "", "-1"])
def test_bad_value_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(DECODE_LAG_ENV, bad)
    with pytest.raises(ValueError, match=DECODE_LAG_ENV):
        decode_lag()
    with pytest.raises(ValueError, match=DECODE_LAG_ENV):  # at load, before any weight
        Engine.load("smollm2-135m", backend="cpu", n_ctx=16, progress=False)


def test_default_is_one(monkeypatch):
    monkeypatch.delenv(DECODE_LAG_ENV, raising=False)
    assert decode_lag() == 1


def test_cuda_lag_one_streams_the_same_events_and_keeps_the_cache_in_step(monkeypatch):
    """The same on the CUDA backend: captured graphs, pinned late reads, the device position reset by the undo."""
    from bw24.runtime import has_gpu, no_gpu_reason

    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    g = Engine.load("smollm2-135m", backend="cuda", n_ctx=N_CTX, progress=False)
    ids = g.tokenizer.encode("The three primary colors are", add_special=True)
    free, _ = run(g, ids, 0, monkeypatch, max_tokens=8)
    for how, kw in endings(free).items():
        evs0, hist0 = run(g, ids, 0, monkeypatch, **kw)
        assert_kv_in_step(g, ids, evs0, hist0)
        evs1, hist1 = run(g, ids, 1, monkeypatch, **kw)
        assert evs1 == evs0, how
        assert_kv_in_step(g, ids, evs1, hist1)
