"""The llama-speculative / llama-lookup output parser on text written with the binaries' own printf
formats (vendored llama.cpp examples/speculative/speculative.cpp and examples/lookup/lookup.cpp)."""

from __future__ import annotations

import pytest
from bw24.engine.perf.errors import PerfError
from bw24.engine.perf.llama_spec import lookup_cmd, parse_llama_spec, speculative_cmd


def _c(fmt: str, *a) -> str:  # C printf formats map 1:1 onto Python's % here
    return fmt % a


SPECULATIVE = "".join([
    "main: n_draft = 16\nllama_perf_context_print: load time = 1.0 ms\n",
    _c("encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", 57, 0.031, 57 / 0.031),
    _c("decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", 128, 0.412, 128 / 0.412),
    "\n",
    _c("n_draft   = %d\n", 16), _c("n_predict = %d\n", 128), _c("n_drafted = %d\n", 150),
    _c("n_accept  = %d\n", 96), _c("accept    = %.3f%%\n", 100.0 * 96 / 150), "\ndraft:\n\n",
])

LOOKUP = "".join([
    _c("encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", 80, 0.02, 4000.0),
    _c("decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", 256, 0.5, 512.0),
    "\n", _c("n_draft      = %d\n", 8), _c("n_predict    = %d\n", 256), _c("n_drafted    = %d\n", 300),
    _c("t_draft_flat = %.2f ms\n", 0.5),
    _c("t_draft      = %.2f ms, %.2f us per token, %.2f tokens per second\n", 3.0, 10.0, 100000.0),
    _c("n_accept     = %d\n", 120), _c("accept       = %.3f%%\n", 40.0),
])


def test_parse_speculative_output():
    r = parse_llama_spec(SPECULATIVE)
    assert r.n_decoded == 128 and r.seconds == pytest.approx(0.412)
    assert r.tok_s == pytest.approx(128 / 0.412, abs=1e-3)  # the decoded line, not the encoded one
    assert (r.n_drafted, r.n_accept) == (150, 96) and r.acceptance == pytest.approx(0.64)


def test_parse_lookup_output():
    r = parse_llama_spec(LOOKUP)
    assert r.tok_s == pytest.approx(512.0) and r.n_decoded == 256
    assert (r.n_drafted, r.n_accept) == (300, 120) and r.acceptance == pytest.approx(0.40)


def test_parse_refuses_output_without_stats():
    with pytest.raises(PerfError, match="decoded N tokens"):
        parse_llama_spec("error: the argument has been removed. use --spec-draft-n-max\n")


def test_commands_use_vendored_flags(tmp_path):
    s = speculative_cmd(tmp_path, "t.gguf", "d.gguf", "hi", 64, 5)
    assert s[0].endswith("llama-speculative") and s[s.index("-md") + 1] == "d.gguf"
    assert s[s.index("--spec-draft-n-max") + 1] == "5" and "--draft-max" not in s
    lk = lookup_cmd(tmp_path, "m.gguf", "hi", 64, 4)
    assert lk[0].endswith("llama-lookup") and lk[lk.index("-n") + 1] == "64"
