"""The ceilings cache: keys, round trip, search order, merge, and clear errors on bad files."""

from __future__ import annotations

import json

import pytest
from bw24.runtime import ceilings as C  # the probe re-exports it; patch the real module


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BW24_CEILINGS_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _rec(device="NVIDIA H200", cc=(9, 0), **results):
    return C.Ceilings(device, cc, results or {"hbm_read_gbs": 4460.0}, {"hbm_read_gbs": "how"}, {}, "2026-01-01")


def test_device_key_is_slug_plus_cc():
    assert C.device_key("NVIDIA H200", (9, 0)) == "nvidia-h200-sm90"
    assert C.device_key("NVIDIA GeForce RTX 5090", "12.0") == "nvidia-geforce-rtx-5090-sm120"
    with pytest.raises(C.CeilingsFormatError, match="compute capability"):
        C.device_key("x", "nine")


def test_save_then_load_round_trips(user_dir):
    path = C.save(_rec(hbm_read_gbs=4321.5, gemm_fp16_tflops=800.0))
    assert path == user_dir / "nvidia-h200-sm90.json"
    got = C.load("NVIDIA H200", (9, 0))
    assert got.results == {"hbm_read_gbs": 4321.5, "gemm_fp16_tflops": 800.0}
    assert got.read_bytes_per_s == 4321.5e9
    assert got.decode_roofline_tok_s(4321.5e6) == pytest.approx(1000.0)


def test_partial_run_merges_into_the_cached_record():
    C.save(_rec(hbm_read_gbs=4000.0, gemm_fp16_tflops=800.0))
    C.save(_rec(hbm_read_gbs=4400.0))
    got = C.load("NVIDIA H200", "9.0")
    assert got.results == {"hbm_read_gbs": 4400.0, "gemm_fp16_tflops": 800.0}


def test_user_cache_wins_over_packaged_file(monkeypatch, tmp_path):
    packaged = tmp_path / "pkg"
    packaged.mkdir()
    (packaged / "nvidia-h200-sm90.json").write_text(json.dumps(_rec(hbm_read_gbs=1.0).to_json()))
    monkeypatch.setattr(C, "PACKAGED_DIR", packaged)
    assert C.load("NVIDIA H200", (9, 0)).results["hbm_read_gbs"] == 1.0
    C.save(_rec(hbm_read_gbs=2.0))
    assert C.load("NVIDIA H200", (9, 0)).results["hbm_read_gbs"] == 2.0


def test_other_device_or_cc_is_not_found():
    C.save(_rec())
    with pytest.raises(C.CeilingsNotFoundError, match="bw24-probe all"):
        C.load("NVIDIA H200", (8, 9))  # canary: same name, other cc must not match
    with pytest.raises(C.CeilingsNotFoundError):
        C.load("NVIDIA RTX PRO 6000", (12, 0))  # a device with no record, packaged or cached


def test_corrupt_file_gives_a_clear_error(user_dir):
    user_dir.mkdir(parents=True)
    bad = user_dir / "nvidia-h200-sm90.json"
    bad.write_text("{not json")
    with pytest.raises(C.CeilingsFormatError, match="nvidia-h200-sm90.json: not valid JSON"):
        C.load("NVIDIA H200", (9, 0))
    bad.write_text(json.dumps({"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "results": {"x": "fast"}}))
    with pytest.raises(C.CeilingsFormatError, match="map metric names to numbers"):
        C.load("NVIDIA H200", (9, 0))
    bad.write_text(json.dumps({**_rec().to_json(), "key": "nvidia-h100-sm90"}))
    with pytest.raises(C.CeilingsFormatError, match="does not match"):
        C.load("NVIDIA H200", (9, 0))


def test_saving_over_a_corrupt_cache_replaces_it(user_dir):
    user_dir.mkdir(parents=True)
    (user_dir / "nvidia-h200-sm90.json").write_text("garbage")
    C.save(_rec(hbm_read_gbs=3.0))
    assert C.load("NVIDIA H200", (9, 0)).results == {"hbm_read_gbs": 3.0}


def test_missing_read_metric_is_a_clear_error():
    with pytest.raises(C.CeilingsNotFoundError, match="hbm_read_gbs"):
        _ = _rec(gemm_fp16_tflops=1.0).read_bytes_per_s


def test_every_committed_device_file_is_valid_and_self_consistent():
    files = sorted(C.PACKAGED_DIR.glob("*.json"))
    for f in files:
        c = C.read_file(f)
        assert f.stem == c.key
        r = c.results
        # ISSUE 7 done-when: read bandwidth within 10% of the driver's device-to-device copy.
        assert 0.9 <= r["hbm_read_gbs"] / r["d2d_copy_gbs"] <= 1.25, f.name
        assert r["hbm_write_gbs"] > 0 and r["l2_read_gbs"] > r["hbm_read_gbs"], f.name
