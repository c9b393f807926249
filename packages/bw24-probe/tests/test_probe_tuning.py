"""Tuning-table IO: section merge, validation with clear errors, and the sweep's correctness gate."""

from __future__ import annotations

import json

import pytest
from bw24.probe import tuning


def test_sections_merge_and_round_trip(tmp_path):
    p = tuning.write_section(tmp_path, "NVIDIA H200", (9, 0), "qmatvec",
                             {"Q4_K": {"default": {"threads": 128}, "shapes": {"4096x4096": {"threads": 256}}}},
                             {"notebook": "t"})
    tuning.write_section(tmp_path, "NVIDIA H200", (9, 0), "attention", {"decode": {"default": {"splits": 8}}}, {})
    t = tuning.read_table(p)
    assert p.name == "nvidia-h200-sm90.json"
    assert t["qmatvec"]["Q4_K"]["shapes"]["4096x4096"] == {"threads": 256}
    assert t["attention"]["decode"]["default"] == {"splits": 8}
    assert set(t["provenance"]) == {"qmatvec", "attention"}


def test_a_sweep_of_some_shapes_keeps_the_others(tmp_path):
    """A second sweep (8B shapes only) must not drop the shapes an earlier sweep measured (the 0.6B's)."""
    w = lambda e, prov: tuning.write_section(tmp_path, "NVIDIA H200", (9, 0), "qmatvec", e, prov)  # noqa: E731
    w({"Q4_K": {"default": {"warps": 1}, "shapes": {"4096x1024": {"warps": 1}, "4096x4096": {"warps": 2}}},
       "Q8_0": {"default": {"warps": 2}}}, {"notebook": "first"})
    p = w({"Q4_K": {"default": {"warps": 4}, "shapes": {"4096x4096": {"warps": 8}, "12288x4096": {"warps": 4}}}},
          {"notebook": "second"})
    t = tuning.read_table(p)
    assert t["qmatvec"]["Q4_K"] == {"default": {"warps": 4}, "shapes": {
        "4096x1024": {"warps": 1}, "4096x4096": {"warps": 8}, "12288x4096": {"warps": 4}}}
    assert t["qmatvec"]["Q8_0"] == {"default": {"warps": 2}}  # a kind the second sweep did not touch
    prov = t["provenance"]["qmatvec"]
    assert prov["notebook"] == "second" and prov["earlier"]["notebook"] == "first"


@pytest.mark.parametrize("bad,msg", [
    ("{oops", "not valid JSON"),
    (json.dumps({"schema": 1, "device": "X", "cc": "9.0", "key": "x-sm90", "qmatvec": {"Q8_0": {}}}),
     "needs a 'default' config"),
    (json.dumps({"schema": 1, "device": "X", "cc": "9.0", "key": "x-sm90",
                 "qmatvec": {"Q8_0": {"default": {"threads": 1.5}}}}), "int/str/bool"),
    (json.dumps({"schema": 1, "device": "X", "cc": "9.0", "key": "y-sm90"}), "does not match"),
])
def test_corrupt_tables_are_named_errors(tmp_path, bad, msg):
    p = tmp_path / "t.json"
    p.write_text(bad)
    with pytest.raises(tuning.TuningTableError, match=msg):
        tuning.read_table(p)


def test_sweep_never_picks_a_wrong_config():
    """Canary: the fastest config computes the wrong answer; it must lose to the correct one."""
    trials = tuning.sweep([{"v": "fast-wrong"}, {"v": "slow-right"}, {"v": "crashes"}],
                          check=lambda c: {"fast-wrong": False, "slow-right": True}[c["v"]],
                          run=lambda c: None, sync=lambda: None, repeats=3, inner=2)
    assert trials[0].config == {"v": "slow-right"} and trials[0].ok
    assert {t.config["v"]: t.ok for t in trials} == {"fast-wrong": False, "slow-right": True, "crashes": False}
    assert "KeyError" in next(t.error for t in trials if t.config["v"] == "crashes")


def test_kind_entry_defaults_to_the_config_most_shapes_chose():
    per = {"4096x1024": {"warps": 1}, "6144x1024": {"warps": 1}, "4096x4096": {"warps": 4}}
    assert tuning.kind_entry(per) == {"default": {"warps": 1}, "shapes": per}
