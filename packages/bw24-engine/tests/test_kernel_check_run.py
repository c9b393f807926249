"""kernel_check.run_cases goes on past a case that raises, and that case is red.

At 1aeef0e the H200's kernel-check ended 139 cases in: a kernel's launch failed (too many registers a block; the
cluster router's, since removed) and the exception left run_cases, so the 392 cases after it were never checked and
the log ended in a traceback.
Now a raising case becomes a red Result that names the exception, and the next cases still run.
"""

from types import SimpleNamespace

import numpy as np
from bw24.engine import kernel_cases, kernel_check
from bw24.engine.kernel_check import compare
from bw24.engine.ops import cuda


def _run(monkeypatch, fns):
    monkeypatch.setattr(cuda, "CudaOps", lambda variant="": SimpleNamespace(_cache={}))
    monkeypatch.setattr(kernel_cases, "cases", lambda: iter(fns))
    lines: list[str] = []
    return kernel_check.run_cases(0, out=lines.append), lines


def _green(name, ref, cu, rng):
    return compare(name, "exact", np.ones(3, np.float32), np.ones(3, np.float32))


def _raises(name, ref, cu, rng):
    raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested for launch\nmore")


def test_a_raising_case_is_red_and_the_cases_after_it_still_run(monkeypatch):
    results, lines = _run(monkeypatch, [("a", _green), ("b raises", _raises), ("c", _green)])
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].case.startswith("b raises (raised RuntimeError: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    assert "\n" not in results[1].case and "more" not in results[1].case  # the message's first line only
    assert len(lines) == 3 and lines[1].endswith("FAIL") and lines[2].endswith("OK")


def test_the_main_verdict_is_red_when_a_case_raised(monkeypatch):
    """main() counts the raised case among the bad ones (exit status 1, the FAIL line), as it does a wrong value;
    the canary half: the same run without the raising case passes."""
    import bw24.runtime

    monkeypatch.setattr(bw24.runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(bw24.runtime, "describe", lambda: "stand-in")
    monkeypatch.setattr(cuda, "CudaOps", lambda variant="": SimpleNamespace(_cache={}))
    for fns, rc in (([("a", _green), ("b raises", _raises)], 1), ([("a", _green)], 0)):
        monkeypatch.setattr(kernel_cases, "cases", lambda fns=fns: iter(fns))
        lines: list[str] = []
        assert kernel_check.main(seed=1, out=lines.append) == rc
        assert (lines[-1].startswith("FAIL: 1 of 2 cases") if rc else lines[-1] == kernel_check.GREEN), lines[-1]


def test_the_launch_counting_spy_passes_keyword_arguments_on():
    """kernel_cases_q8.count_launches wraps CudaOps._launch: it must pass a launch's keyword arguments on. At 11bfbd6
    the H200's kernel-check turned the two prefill `norm_matmul_multi` cases red (TypeError: the spy took no
    `stream=`, which the prefill overlap, the default since 76809cf, gives its launches on the side stream)."""
    from bw24.engine.kernel_cases_q8 import count_launches

    seen: list = []
    cu = SimpleNamespace(_launch=lambda f, *a, stream=None: seen.append((f, a, stream)))

    def two():
        cu._launch("k1", 1, 2)
        cu._launch("k2", 3, stream="side")

    assert count_launches(cu, two) == 2
    assert seen == [("k1", (1, 2), None), ("k2", (3,), "side")]
    assert cu._launch("k3") is None and seen[-1] == ("k3", (), None)  # the original is back
