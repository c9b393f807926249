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
