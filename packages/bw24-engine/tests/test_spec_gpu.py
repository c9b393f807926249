"""GPU: greedy speculative decoding on the cuda backend (graphs on) is token-identical to the cuda
engine's plain decode for K = 1..8: n-gram, MTP and draft-model drafters on a synthetic qwen3 model,
through the fast path (verify graphs per T, device argmax) and the host path. Skipped, saying so,
without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.runtime import has_gpu, no_gpu_reason

if not has_gpu():
    pytest.skip(f"no CUDA GPU: {no_gpu_reason()}", allow_module_level=True)

from bw24.engine import Engine  # noqa: E402
from bw24.engine.graph import greedy_decode  # noqa: E402
from bw24.engine.spec import DraftModelDrafter, MTPDrafter, NgramDrafter, SpecDecoder  # noqa: E402
from bw24.engine.spec.device import DeviceIO  # noqa: E402
from bw24.gguf.synth import synth  # noqa: E402

PROMPT = "def f(x):\n    return x + 1\n\ndef f(x):\n    return"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    p = tmp_path_factory.mktemp("spec_gpu") / "qwen3-tiny-mtp.gguf"
    synth("qwen3-tiny", p, mix="q4_k_m", seed=1, mtp=1)
    load = lambda: Engine.load(p, backend="cuda", n_ctx=512, progress=False)  # noqa: E731
    eng, same = load(), load()
    assert eng.ops.use_graphs, "graphs must be on for this test"
    return eng, same


@pytest.mark.parametrize("k", range(1, 9))
def test_spec_cuda_greedy_identical(engines, k):
    eng, same = engines
    ids = eng.tokenizer.encode(PROMPT, add_special=True)
    ref = greedy_decode(eng.model, ids, 48)
    for d in (NgramDrafter(), MTPDrafter(eng.model, eng.gguf), DraftModelDrafter(same.model)):
        for device in (True, False):
            # batched verify: the claim under test is the kernels' (the gate catches a divergence)
            dec = SpecDecoder(eng.model, d, k=k, verify="batched", device=device)
            for rep in range(2):  # the second run replays the captured verify graphs
                got = list(dec.generate(ids, 48))
                assert got == ref, f"{d.name} K={k} device={device} run {rep}: first divergence at " \
                    f"{next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), min(len(got), len(ref)))}"
            if device:
                assert dec._fast is not None and dec._fast.graphs.runs, "the fast path did not run"
        if d.name == "draft":
            assert dec.stats.acceptance == 1.0, "draft = target must accept every draft"


def test_spec_cuda_greedy_identical_with_the_tensor_core_attention(engines):
    """BW24_ATTN_DEC_MMA (the attention's pass 1 on tensor cores for rows past N live keys, attention_dec_mma.cu):
    a row's kernel follows its own keys, so speculative decoding with it stays token-identical to plain decode
    with it, at a threshold the 48 tokens cross (the first multiple of 32 past the prompt: both kernels in one
    verify launch, the depth classes' launch skips in play) and with `all`; the mma kernel really ran (its
    launches were built). (At eae1eee this test assumed a prompt under 32 tokens; the tokenizer makes 39.)"""
    from bw24.engine.ops.cuda.attn import DEC_MMA_ALL

    eng, same = engines
    ids = eng.tokenizer.encode(PROMPT, add_special=True)
    cross = 32 * (len(ids) // 32 + 1)  # the first threshold (a multiple of 32) over the prompt's keys
    assert cross + 8 < len(ids) + 48, "the threshold must fall inside the decode"
    names: list[str] = []
    # captures build their launches through _k_with (attention asks it for every launch since ea5030b; _k calls it
    # too): at 1aeef0e this test still wrapped _k and saw no attention kernel at all
    k_orig = eng.ops._k_with
    eng.ops._k_with = lambda f, n, extra: (names.append(n), k_orig(f, n, extra))[1]
    try:
        for frm in (cross, DEC_MMA_ALL):
            eng.ops.attn_dec_mma = same.ops.attn_dec_mma = frm
            names.clear()
            ref = greedy_decode(eng.model, ids, 48)
            assert any(n.startswith("attn_dec_mma") for n in names), f"BW24_ATTN_DEC_MMA={frm}: the mma kernel never ran"
            for d in (NgramDrafter(), DraftModelDrafter(same.model)):
                for k in (2, 5):
                    dec = SpecDecoder(eng.model, d, k=k, verify="batched", device=True)
                    got = list(dec.generate(ids, 48))
                    assert got == ref, f"{d.name} K={k} dec_mma={frm}: first divergence at " \
                        f"{next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), len(ref))}"
    finally:
        eng.ops.attn_dec_mma = same.ops.attn_dec_mma = 0
        del eng.ops._k_with


def test_spec_cuda_prompt_cache_equals_plain_decodes(engines):
    """MTP drafting feeds the prompt for its hidden rows (spec.runner.prefill), eagerly; plain decode's prompt
    runs as prefill graphs. The cache must be the same bits: at 6e0baa5 the eager chunk took the flash
    attention and the graph the mma one, and the H200's MTP spec run on the synthetic 8B diverged from plain
    decode at its 88th token (this module's 48 tokens on the tiny model had not flipped). Canary: eager chunks
    without the graphs' kernel choice (Transformer._eager_chunk bypassed) leave another cache."""
    eng, _ = engines
    m = eng.model
    ids = eng.tokenizer.encode(PROMPT * 2, add_special=True)
    assert m._graphed(len(ids)), "the prompt must be long enough for a prefill graph"
    assert len(ids) <= min(m.max_batch, m.buf.logit_rows), "one chunk in every feed (all logits chunk by logit_rows)"

    def cache(**kw) -> list[np.ndarray]:
        m.kv.reset()
        m.feed(ids, **kw)
        return [eng.ops.to_host(a) for i in range(m.cfg.n_layer) for a in (m.kv.k[i], m.kv.v[i])]

    plain = cache()
    assert all(np.array_equal(a, b) for a, b in zip(plain, cache(), strict=True))  # the graph's replay too
    for kw in (dict(hidden=[]), dict(all_logits=True)):
        assert all(np.array_equal(a, b) for a, b in zip(plain, cache(**kw), strict=True)), f"feed({kw})"
    m._eager_chunk = m.forward  # the canary: the eager rules' kernels
    try:
        assert not all(np.array_equal(a, b) for a, b in zip(plain, cache(hidden=[]), strict=True))
    finally:
        del m._eager_chunk
    m.kv.reset()


def test_spec_cuda_verify_argmax_kernel_matches_numpy(engines):
    eng, _ = engines
    rng = np.random.default_rng(0)
    io = DeviceIO(eng.ops)
    for T, V in ((1, 7), (5, 1000), (9, 151936)):
        lg = rng.integers(-3, 4, size=(T, V)).astype(np.float32)  # many ties: lowest index must win
        ids = rng.integers(0, V, T).astype(np.int32)
        d_lg, d_ids, d_out = eng.ops.zeros((T, V)), eng.ops.zeros((T,), np.int32), eng.ops.zeros((2 * T,), np.int32)
        eng.ops.copy_from_host(d_lg, lg)
        eng.ops.copy_from_host(d_ids, ids)
        io.argmax_rows(d_lg, d_ids, d_out)
        got = eng.ops.to_host(d_out)
        assert got[:T].tolist() == np.argmax(lg, axis=1).tolist() and got[T:].tolist() == ids.tolist()
