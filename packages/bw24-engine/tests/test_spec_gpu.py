"""GPU: greedy speculative decoding on the cuda backend is token-identical to the cuda engine's plain
decode for K = 1..8 (n-gram and MTP drafters, synthetic qwen3 model). Skipped, saying so, without a GPU."""

from __future__ import annotations

import pytest
from bw24.runtime import has_gpu, no_gpu_reason

if not has_gpu():
    pytest.skip(f"no CUDA GPU: {no_gpu_reason()}", allow_module_level=True)

from bw24.engine import Engine  # noqa: E402
from bw24.engine.graph import greedy_decode  # noqa: E402
from bw24.engine.spec import MTPDrafter, NgramDrafter, SpecDecoder  # noqa: E402
from bw24.gguf.synth import synth  # noqa: E402


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    p = tmp_path_factory.mktemp("spec_gpu") / "qwen3-tiny-mtp.gguf"
    synth("qwen3-tiny", p, mix="q4_k_m", seed=1, mtp=1)
    return Engine.load(p, backend="cuda", n_ctx=512, progress=False)


@pytest.mark.parametrize("k", range(1, 9))
def test_spec_cuda_greedy_identical(eng, k):
    ids = eng.tokenizer.encode("def f(x):\n    return x + 1\n\ndef f(x):\n    return", add_special=True)
    ref = greedy_decode(eng.model, ids, 48)
    for d in (NgramDrafter(), MTPDrafter(eng.model, eng.gguf)):
        dec = SpecDecoder(eng.model, d, k=k)
        assert list(dec.generate(ids, 48)) == ref, f"{d.name} K={k}"
