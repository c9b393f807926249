"""Greedy speculative decoding is token-identical to plain decode for every K and every drafter
(draft model, n-gram, MTP, FR-Spec-trimmed draft), on synthetic qwen3-tiny models (CPU)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.graph import greedy_decode
from bw24.engine.spec import (
    DraftModelDrafter,
    DraftVocabMismatchError,
    MTPDrafter,
    NgramDrafter,
    NoMTPHeadError,
    SpecDecoder,
    Verifier,
    check_same_vocab,
)
from bw24.engine.spec.frspec import load_ranks
from bw24.gguf.synth import synth

N = 24
PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"
# Most tests start from a one-token prompt: on this 2-core box a multi-threaded OpenBLAS sgemm with
# T > 1 rows (the batched prefill) costs ~20 ms a call; a one-token prefill is an sgemv.
FIRST = [300]


@pytest.fixture(scope="module")
def models(tmp_path_factory, helpers):
    d = tmp_path_factory.mktemp("spec_models")
    m = helpers.spec_pair(d, n_ctx=256)
    synth("llama-tiny", d / "othervocab.gguf", mix="q8_0", seed=3)  # for the vocabulary-mismatch test
    return dict(m, dir=d, ids=FIRST, long_ids=m["target"].tokenizer.encode(PROMPT, add_special=True))


@pytest.fixture(scope="module")
def reference(models):
    return greedy_decode(models["target"].model, models["ids"], N)


def _run(models, drafter, k, **kw):
    dec = SpecDecoder(models["target"].model, drafter, k=k, **kw)
    return list(dec.generate(models["ids"], N)), dec.stats


@pytest.mark.parametrize("k", range(1, 9))
def test_spec_greedy_identical_all_drafters(models, reference, k):
    drafters = [NgramDrafter(), DraftModelDrafter(models["draft"].model),
                MTPDrafter(models["target"].model, models["target"].gguf)]
    for d in drafters:
        out, st = _run(models, d, k)
        assert out == reference, f"{d.name} K={k}: diverges at {next(i for i, (a, b) in enumerate(zip(out, reference, strict=False)) if a != b)}"
        assert st.drafted > 0, f"{d.name} K={k} never drafted"


def test_spec_ngram_accepts_on_repetitive_prompt(models):
    """A batched (multi-token) prefill, then n-gram rounds on a prompt that repeats itself."""
    m, ids = models["target"].model, models["long_ids"]
    ref = greedy_decode(m, ids, N)
    dec = SpecDecoder(m, NgramDrafter(), k=4)
    assert list(dec.generate(ids, N)) == ref
    assert dec.stats.accepted > 0


@pytest.mark.parametrize("k", [1, 4, 8])
def test_spec_draft_equal_target_accepts_everything(models, reference, k):
    out, st = _run(models, DraftModelDrafter(models["same"].model), k)
    assert out == reference
    assert st.drafted > 0 and st.accepted == st.drafted, f"acceptance {st.accepted}/{st.drafted}"
    assert st.rounds < N - 1  # several tokens per round


def test_spec_adaptive_k_grows_at_full_acceptance(models, reference):
    dec = SpecDecoder(models["target"].model, DraftModelDrafter(models["same"].model), k=1, adaptive=True)
    assert list(dec.generate(models["ids"], N)) == reference
    assert max(dec.stats.k_trace) > 1


def test_spec_adaptive_k_grows_only_to_the_backends_cap(models, reference, monkeypatch):
    """An adaptive K grows to the backend's spec_k_cap (cuda: 7, a verify's K + 1 rows in the 8-row matvec bucket)
    and no further, at full acceptance; a fixed K past the cap is the caller's; the output stays plain decode's."""
    from bw24.engine.spec.verify import AdaptiveK

    ops = models["target"].model.ops
    monkeypatch.setattr(type(ops), "spec_k_cap", 3, raising=False)
    dec = SpecDecoder(models["target"].model, DraftModelDrafter(models["same"].model), k=1, adaptive=True)
    assert list(dec.generate(models["ids"], N)) == reference
    assert max(dec.stats.k_trace) == 3  # reached the cap, never past it
    fixed = SpecDecoder(models["target"].model, DraftModelDrafter(models["same"].model), k=6)
    assert fixed.k.k == 6 and fixed.k.grow_to == 6
    k = AdaptiveK(5, 8, adaptive=True, grow_to=7)  # full acceptance: grows to 7, not 8
    for _ in range(6):
        k.update(k.k, k.k)
    assert k.k == 7
    assert AdaptiveK(8, 8, adaptive=True, grow_to=7).grow_to == 8  # never under the starting K


def test_spec_k_max_env_is_checked_and_recorded():
    """BW24_SPEC_K_MAX (CudaOps.spec_k_cap): unset the 8-row bucket's 7; 1..8 taken and recorded in perf rows;
    anything else a clear error naming the variable."""
    from bw24.engine.ops.cuda.backend import CudaOps, spec_k_cap_of

    assert spec_k_cap_of(None) == CudaOps.spec_k_cap == 7 and spec_k_cap_of("8") == 8 and spec_k_cap_of("1") == 1
    for bad in ("0", "9", "x", ""):
        with pytest.raises(ValueError, match=f"BW24_SPEC_K_MAX='{bad}'"):
            spec_k_cap_of(bad)
    ops = CudaOps.__new__(CudaOps)
    assert not any(o.startswith("spec_k_max") for o in CudaOps.opt_in(ops))
    ops.spec_k_max_env = "8"
    assert "spec_k_max_8" in CudaOps.opt_in(ops)


def test_spec_frspec_trimmed_draft_stays_exact(models, reference, tmp_path):
    V = models["target"].config.n_vocab
    full = tmp_path / "all.json"
    full.write_text(json.dumps({"n_vocab": V, "ids": list(range(V))}))
    ids = load_ranks(full, V)
    out, st = _run(models, DraftModelDrafter(models["same"].model, frspec_ids=ids, gguf=models["same"].gguf), 4)
    assert out == reference and st.accepted == st.drafted  # every row kept: the same drafts as untrimmed
    # drop the tokens the target emits from the drafter's head: drafts go wrong, output must not
    keep = np.setdiff1d(np.arange(V), reference)
    out, st = _run(models, DraftModelDrafter(models["same"].model, frspec_ids=keep, gguf=models["same"].gguf), 4)
    assert out == reference and st.accepted == 0


def test_spec_frspec_trimmed_draft_on_the_device_path(models, reference, tmp_path):
    """The fast path (propose_into: the draft's decode step samples its own logits buffer, as on the GPU) with a
    trimmed head drafts what the host path does: TrimmedHeadOps spreads the kept rows over the full row. Before
    that, the device path drafted from a buffer no step wrote: acceptance 0 of 82 drafts against 18 of 18."""
    V = models["target"].config.n_vocab
    full = tmp_path / "all.json"
    full.write_text(json.dumps({"n_vocab": V, "ids": list(range(V))[::-1]}))  # every id, kept in another order
    runs = []
    for dev in (False, True):
        d = DraftModelDrafter(models["same"].model, frspec_ids=load_ranks(full, V), gguf=models["same"].gguf)
        out, st = _run(models, d, 4, device=dev)
        runs.append((out, st.drafted, st.accepted))
    assert runs[0] == runs[1] and runs[0][0] == reference and runs[0][1] == runs[0][2] > 0
    keep = np.setdiff1d(np.arange(V), reference)  # the target's tokens dropped: every draft rejected, either path
    d = DraftModelDrafter(models["same"].model, frspec_ids=keep, gguf=models["same"].gguf)
    out, st = _run(models, d, 4, device=True)
    assert out == reference and st.drafted > 0 and st.accepted == 0


def test_spec_mtp_frspec_trimmed_head_drafts_as_the_full_one(models, reference, tmp_path):
    """An MTP head trimmed by FR-Spec (every id kept, in another order) drafts exactly what the full head does, on
    the host path and on the device path; with the target's tokens dropped every draft is rejected and the output
    stays the target's. The target's own head is never trimmed (its plain decode is the reference)."""
    V = models["target"].config.n_vocab
    t = models["target"]
    runs = []
    for dev in (False, True):
        for ids in (None, np.arange(V)[::-1].copy()):
            out, st = _run(models, MTPDrafter(t.model, t.gguf, frspec_ids=ids), 4, device=dev)
            runs.append((out, st.drafted, st.accepted))
    assert all(r == runs[0] for r in runs) and runs[0][0] == reference and runs[0][1] > 0
    keep = np.setdiff1d(np.arange(V), reference)
    d = MTPDrafter(t.model, t.gguf, frspec_ids=keep)
    assert d.name == f"mtp+frspec{keep.size}"
    for dev in (False, True):
        out, st = _run(models, d, 4, device=dev)
        assert out == reference and st.drafted > 0 and st.accepted == 0
    assert greedy_decode(t.model, models["ids"], N) == reference  # the target's head untouched


def test_frspec_expand_cols_reference():
    """DeviceIO.expand_cols on the CPU (kernel_check's reference for spec.cu frspec_expand): kept ids get their
    trimmed logit, the rest -inf."""
    from bw24.engine.ops.ref import RefOps
    from bw24.engine.spec.device import DeviceIO
    from bw24.engine.spec.frspec import inverse_ids

    ids = np.array([5, 0, 3], np.int64)
    sub = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    out = np.zeros((2, 7), np.float32)
    DeviceIO(RefOps()).expand_cols(sub, inverse_ids(ids, 7), out)
    ninf = -np.inf
    assert np.array_equal(out, [[2.0, ninf, ninf, 3.0, ninf, 1.0, ninf], [5.0, ninf, ninf, 6.0, ninf, 4.0, ninf]])


def test_spec_rowwise_verify_rows_equal_decode_bitwise(models):
    """The verify forward's rows are bit-identical to decode steps (not merely close)."""
    eng = models["target"]
    prefix, block = [300, 41, 7], [5, 77, 300, 12, 9]
    dec = eng.decode_logits(prefix + block)[len(prefix) - 1:]  # token-by-token decode
    m = eng.model
    m.kv.reset()
    for t in prefix[:-1]:
        m.feed([t])
    got = Verifier(m, "rowwise").forward(prefix[-1:] + block).logits  # one T = 6 forward
    assert got.shape == dec.shape and np.array_equal(got, dec)


def test_spec_vocab_mismatch_refused(models):
    t, d = models["target"], models["draft"]
    check_same_vocab(t.gguf, t.config, d.gguf, d.config)  # same tokenizer: accepted
    toks = list(t.gguf.get("tokenizer.ggml.tokens"))
    renamed = SimpleNamespace(path=d.gguf.path, get=lambda k, default=None: toks[:7] + ["<other>"] + toks[8:])
    with pytest.raises(DraftVocabMismatchError, match="token 7 is"):
        check_same_vocab(t.gguf, t.config, renamed, d.config)
    with pytest.raises(DraftVocabMismatchError, match="n_vocab=600"):
        check_same_vocab(t.gguf, t.config, d.gguf, replace(d.config, n_vocab=600))


def test_spec_mtp_refused_without_head(models):
    d = models["draft"]
    with pytest.raises(NoMTPHeadError, match="nextn_predict_layers"):
        MTPDrafter(d.model, d.gguf)


def test_spec_mtp_rollback_state_equals_fresh_state(models, reference):
    """Random MTP heads are rarely right, so drive the drafter through accepted prefixes of 0..3
    tokens ourselves: after every rollback its proposal must equal a fresh drafter's on that context."""
    from bw24.engine.spec.runner import prefill

    t = models["target"]
    full = FIRST + reference
    t.model.kv.reset()
    _, H = prefill(t.model, full, want_hidden=True)  # the target's hidden rows of the whole sequence
    inc = MTPDrafter(t.model, t.gguf)
    inc.begin(full[:1], H[:1])
    L = 2
    for j in [0, 3, 1, 2, 0, 3, 3, 1, 0]:
        fresh = MTPDrafter(t.model, t.gguf)
        fresh.begin(full[: L - 1], H[: L - 1])
        assert inc.propose(full[:L], 3).tokens == fresh.propose(full[:L], 3).tokens, f"context {L}"
        inc.rollback(full[: L + j + 1], H[L - 1 : L + j])  # the verify's rows of the kept positions
        L += j + 1
        assert inc.head.kv.n_past + inc.pending.shape[0] == L - 1


def test_spec_mtp_input_and_head_follow_nextn_definition(models):
    """The NextN pieces against NumPy written from the definition (dequantized GGUF tensors):
    x = eh_proj @ [enorm * rms(emb(t)); hnorm * rms(output_norm * rms(h))], and the draft logits are
    output @ (shared_head_norm * rms(g)) for the block output g."""
    t = models["target"]
    f, cfg = t.gguf, t.config
    d = MTPDrafter(t.model, f)
    il = cfg.n_layer
    W = lambda n: f.tensor(n).dequantize().astype(np.float64)  # noqa: E731
    rms = lambda v, w: v / np.sqrt(np.mean(v * v) + cfg.rms_eps) * w  # noqa: E731
    h = np.random.default_rng(0).standard_normal(cfg.n_embd).astype(np.float32)
    tok = 123
    logits = d._run([tok], h[None, :], normed=False)  # one pair at head position 0
    x_ref = W(f"blk.{il}.nextn.eh_proj.weight") @ np.concatenate([
        rms(W("token_embd.weight")[tok], W(f"blk.{il}.nextn.enorm.weight")),
        rms(rms(h.astype(np.float64), W("output_norm.weight")), W(f"blk.{il}.nextn.hnorm.weight"))])
    x_got = d.head.ops.cat[:1].astype(np.float64) @ W(f"blk.{il}.nextn.eh_proj.weight").T
    np.testing.assert_allclose(x_got[0], x_ref, rtol=2e-4, atol=2e-4)
    g = d.head.buf.h[0].astype(np.float64)  # block output before shared_head_norm
    head = W("output.weight") if not cfg.tie_embeddings else W("token_embd.weight")
    ref = head @ rms(g, W(f"blk.{il}.nextn.shared_head_norm.weight"))
    np.testing.assert_allclose(logits, ref, rtol=1e-3, atol=1e-3)


def test_spec_greedy_with_penalties_matches_plain(models):
    """Penalties count the row's own context (accepted drafts included), as plain decode's counts do."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import plain_decode

    m = models["target"].model
    p = SamplingParams(repetition_penalty=1.5, frequency_penalty=0.3)
    ref, _ = plain_decode(m, [300, 41, 300], N, p)
    assert ref != greedy_decode(m, [300, 41, 300], N)  # the penalties change the output here
    for d in (NgramDrafter(), DraftModelDrafter(models["same"].model)):
        assert list(SpecDecoder(m, d, k=3).generate([300, 41, 300], N, p)) == ref, d.name


def test_plain_decode_ends_after_a_stop_token(models, reference):
    """spec_bench's end-of-turn runs: plain_decode(stop_ids) is the unstopped output cut after the
    first stop token, as SpecDecoder.generate(stop_ids) ends."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import plain_decode

    m = models["target"].model
    stop = reference[5]
    cut = reference[: reference.index(stop) + 1]
    out, _ = plain_decode(m, models["ids"], N, SamplingParams(), stop_ids=[stop])
    assert out == cut and len(cut) < N
    dec = SpecDecoder(m, NgramDrafter(), k=4)
    assert list(dec.generate(models["ids"], N, stop_ids=[stop])) == cut


def test_plain_decode_keeps_one_step_per_params_and_ops(models, reference):
    """Repeated plain_decode calls replay one kept step (no capture inside the timed loop) and give the
    same tokens; another ops object (a wrapper) gets its own step."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import plain_decode
    from bw24.engine.spec.exact_ops import RowExactOps

    m = models["target"].model
    m.__dict__.pop("_plain_steps", None)
    a, _ = plain_decode(m, models["ids"], N, SamplingParams())
    b, _ = plain_decode(m, models["ids"], N, SamplingParams())
    assert a == b == reference and len(m._plain_steps) == 1
    saved, m.ops = m.ops, RowExactOps(m.ops)
    try:
        c, _ = plain_decode(m, models["ids"], N, SamplingParams())
    finally:
        m.ops = saved
    assert c == reference and len(m._plain_steps) == 2


def test_frspec_expand_launch_plan(helpers):
    """spec.cu frspec_expand's launch (ops/cuda/spec.py): one 256-thread block a 256 ids of a row, a row a grid
    line, as many arguments as the kernel declares (a miscount is garbage on the device, not an error)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.spec import EXPAND_THREADS, frspec_expand

    launches = []
    ops = SimpleNamespace(_k=lambda f, n: (f, n), _launch=lambda fn, grid, block, args: launches.append(
        (fn, grid, block, args)))
    sub, inv, out = np.zeros((3, 77), np.float32), np.zeros(1000, np.int32), np.zeros((3, 1000), np.float32)
    frspec_expand(ops, sub, inv, out)
    (fn, grid, block, args), = launches
    assert fn == ("spec.cu", "frspec_expand") and grid == (4, 3) and block == EXPAND_THREADS == 256
    assert len(args) == len(helpers.kernel_params("spec.cu", "frspec_expand")) == 5
    assert args[2] == 77 and args[3] == 1000


def test_frspec_trimmed_rows_are_named_by_their_ids(models):
    """Two trims of one head with as many rows in another order get other names: the backends cache weights by
    (name, data address), and a freed copy's address recurs (in this file's run the reversed trim once read the
    identity one's cached weight: acceptance 0 of 82)."""
    from bw24.engine.spec.frspec import trimmed_rows

    ti = models["target"].gguf.tensor("output.weight")
    a = trimmed_rows(ti, np.arange(100))
    b = trimmed_rows(ti, np.arange(100)[::-1].copy())
    c = trimmed_rows(ti, np.arange(100))
    assert a.name != b.name and a.name == c.name and a.shape == b.shape == (100, *ti.shape[1:])
