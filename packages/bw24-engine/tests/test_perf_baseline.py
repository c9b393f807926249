"""perf-CI gate: baseline = median of the device+cell's last 5 rows; > 3% drop fails, > 1.5% warns,
acceptance drop > 0.05 fails. Canary: a fake 5% regression must fail."""

from __future__ import annotations

import pytest
from bw24.engine.perf.baseline import check_row, check_rows, worst

DEV, CELL = "NVIDIA H200 sm_90a", "qwen3-8b-q4_k_m-tg128@d0"


def row(v, device=DEV, cell=CELL, mode="decode", **kw):
    key = "prefill_tok_s" if mode == "prefill" else "decode_tok_s"
    return {"device": device, "cell": cell, "mode": mode, key: v, **kw}


def history():
    # older rows (ignored: outside the last 5) and other devices/cells (ignored) around 5 rows of 100
    return ([row(10.0)] * 3 + [row(100.0)] * 5 + [row(1.0, device="other GPU"), row(1.0, cell="other-cell")])


@pytest.mark.parametrize("value, status", [(95.0, "fail"), (98.0, "warn"), (99.0, "pass"), (101.0, "pass"),
                                           (96.9, "fail"), (98.6, "pass")])
def test_drop_thresholds(value, status):
    v = check_row(history(), row(value))
    assert v.status == status, v.message
    assert v.baseline == 100.0


def test_canary_5pct_regression_fails_the_run():
    verdicts = check_rows(history(), [row(95.0), row(120.0, cell="other-cell")])
    assert worst(verdicts) == "fail"


def test_baseline_is_median_of_last_five():
    h = [row(v) for v in (1.0, 1.0, 90.0, 100.0, 110.0, 200.0, 95.0)]  # last 5: 90 100 110 200 95 -> 100
    assert check_row(h, row(100.0)).baseline == 100.0


def test_prefill_cells_use_prefill_figure():
    h = [row(1000.0, mode="prefill", cell="x-pp512@d0")] * 5
    assert check_row(h, row(950.0, mode="prefill", cell="x-pp512@d0")).status == "fail"


def test_acceptance_drop_fails_even_when_faster():
    h = [row(100.0, acceptance=0.80)] * 5
    assert check_row(h, row(110.0, acceptance=0.74)).status == "fail"
    assert check_row(h, row(100.0, acceptance=0.76)).status == "pass"


def test_no_history_is_new_not_fail():
    assert check_row([], row(1.0)).status == "new"
    assert worst(check_rows([], [row(1.0)])) == "new"


def test_opt_in_variants_keep_their_own_baseline():
    """A row run with an opt-in path (BW24_ATTN_Q8, ...) is judged against rows of the same variant only:
    a faster opt-in run must not become the plain cell's baseline, and vice versa."""
    h = [row(100.0)] * 5 + [row(120.0, opt_in=["attn_q8"])] * 5
    plain, opt = check_row(h, row(99.0)), check_row(h, row(113.0, opt_in=["attn_q8"]))
    assert plain.baseline == 100.0 and plain.status == "pass"
    assert opt.baseline == 120.0 and opt.status == "fail" and "+attn_q8" in opt.message
    assert check_row(h, row(100.0, opt_in=["norm_epi"])).status == "new"


def test_a_float32_cache_row_is_not_the_float16_baseline():
    """The KV cache is part of the variant: rows of the other cache (or written before rows carried it, which
    ran float32) never judge a run, so a cache change cannot pass or fail a cell by itself."""
    h = [row(290.0, kv_dtype="float32")] * 3 + [row(292.0)] * 2
    assert check_row(h, row(278.0, kv_dtype="float16")).status == "new"
    assert check_row(h, row(278.0)).baseline == 290.0 and check_row(h, row(278.0)).status == "fail"
    f16 = check_row(h + [row(280.0, kv_dtype="float16")] * 5, row(278.0, kv_dtype="float16"))
    assert f16.baseline == 280.0 and f16.status == "pass"
