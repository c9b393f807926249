"""benchmarks/gpu_profile.py parse_spec: the model argument of the `profile` and `ncu` stages
(PRESET[:QUANT[:DEPTH]], gpu_verify_ncu.py imports it). A typo there costs a GPU stage, so it is refused
here with a message that names it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_profile.py"


@pytest.fixture(scope="module")
def parse_spec():
    spec = importlib.util.spec_from_file_location("gpu_profile_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse_spec


def test_preset_quant_depth(parse_spec):
    assert parse_spec("qwen3-8b") == ("qwen3-8b", "q4_k_m", 64)
    assert parse_spec("qwen3-8b:q8_0") == ("qwen3-8b", "q8_0", 64)
    assert parse_spec("qwen3-32b:q4_k_m:4096") == ("qwen3-32b", "q4_k_m", 4096)
    assert parse_spec("qwen3-32b::4096") == ("qwen3-32b", "q4_k_m", 4096)
    assert parse_spec("qwen3-0.6b:q4_k_m:0") == ("qwen3-0.6b", "q4_k_m", 0)


@pytest.mark.parametrize("bad, says", [("qwen3-8b:q4_k_m:4k", "whole number"), ("qwen3-8b:q4_k_m:-1", "0 or more"),
                                       (":q4_k_m", "PRESET"), ("a:b:1:2", "PRESET")])
def test_a_bad_spec_is_refused_by_name(parse_spec, bad, says):
    with pytest.raises(SystemExit) as e:
        parse_spec(bad)
    assert says in str(e.value) and repr(bad) in str(e.value)
