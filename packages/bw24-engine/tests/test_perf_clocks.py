"""perf/clocks.py: the GPU's clocks, power and clock-event reasons sampled while each arm of a cell runs (the
rows' clocks_load). nvidia-smi is stood in for by a script that prints its CSV lines, so the sampling, the
attribution of samples to arms by time and the summaries are checked without a GPU."""

from __future__ import annotations

import sys
import time

from bw24.engine.perf import clocks

# prints nvidia-smi's CSV every 10 ms, the SM clock counting up (so a sample's value says when it was taken)
FAKE = [sys.executable, "-u", "-c",
        "import time\nfor i in range(100000):\n"
        "    print(f'{1000 + i}, 3201, {300 + i % 7}.5, 40, 0x{4 if i % 2 else 0:016x}', flush=True)\n"
        "    time.sleep(0.01)\n"]


def test_a_line_parses_and_anything_else_is_dropped():
    assert clocks.parse_line("1980, 3201, 512.34, 45, 0x0000000000000004\n") == \
        {"sm": 1980.0, "mem": 3201.0, "power": 512.34, "temp": 45.0, "reasons": 4}
    assert clocks.parse_line("1980, 3201, [N/A], 45") == {"sm": 1980.0, "mem": 3201.0, "power": None, "temp": 45.0,
                                                          "reasons": None}
    for junk in ("clocks.current.sm [MHz], clocks.current.memory [MHz]", "Field \"x\" is not a valid field", ""):
        assert clocks.parse_line(junk) is None


def test_a_summary_has_medians_extremes_and_the_reasons_by_name():
    s = [clocks.parse_line(x) for x in ("1980, 3201, 500, 40, 0x0", "1755, 3201, 690, 44, 0x4",
                                        "1890, 3201, 600, 42, 0x44")]
    assert clocks.summarize(s) == {"samples": 3, "sm_mhz_median": 1890.0, "sm_mhz_min": 1755.0,
                                   "mem_mhz_median": 3201.0, "power_w_median": 600.0, "power_w_max": 690.0,
                                   "temp_c_max": 44.0, "reasons": ["hw_thermal_slowdown", "sw_power_cap"]}
    assert clocks.summarize([]) is None


def test_samples_go_to_the_arm_whose_call_they_fall_in():
    """Two arms called in turn (as bw24 and llama.cpp alternate): each gets the samples of its own calls, so the
    later arm's counter values are all above the earlier one's; time between calls belongs to neither."""
    with clocks.ClockSampler(FAKE) as s:
        a, b = s.arm("a", lambda: time.sleep(0.15)), s.arm("b", lambda: time.sleep(0.15))
        a()
        time.sleep(0.1)
        b()
    got = s.summaries()
    assert list(got) == ["a", "b"] and got["a"]["samples"] >= 5 and got["b"]["samples"] >= 5
    assert got["a"]["sm_mhz_min"] < got["b"]["sm_mhz_min"] and got["a"]["sm_mhz_median"] < got["b"]["sm_mhz_min"]
    assert got["a"]["samples"] + got["b"]["samples"] < len(s.samples)  # the gap's samples: in no arm
    assert got["a"]["reasons"] == ["sw_power_cap"]


def test_no_sampler_no_field():
    """Canary: a command that cannot run, or prints nothing parseable, gives no summaries (the rows then carry no
    clocks_load) and no error; the CPU backend samples nothing."""
    for cmd in (["/nonexistent/nvidia-smi"], [sys.executable, "-c", "print('NVIDIA-SMI has failed')"], None):
        with clocks.ClockSampler(cmd) as s:
            s.arm("bw24", lambda: time.sleep(0.05))()
        assert s.summaries() == {}
    assert clocks.sampler_for("cpu").cmd is None and clocks.sampler_for("cuda", 0).cmd is None
    cmd = clocks.nvidia_smi_command(25, "clocks_event_reasons.active")
    assert "--loop-ms=25" in cmd and cmd[1].endswith("temperature.gpu,clocks_event_reasons.active")


def test_bench_rows_carry_the_sampled_clocks(tmp_path, monkeypatch, capsys):
    """bench with a sampler (the fake nvidia-smi, on the CPU backend): the row holds bw24's arm and the cell's
    output says what the clocks were."""
    from bw24.engine.cli import main
    from bw24.engine.perf.jsonl import read_rows

    monkeypatch.setattr(clocks, "sampler_for", lambda backend, ms=50: clocks.ClockSampler(FAKE))
    (tmp_path / "cells.toml").write_text('[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "prefill"\n'
                                         'depth = 0\ntokens = 256\n')
    assert main(["bench", "--backend", "cpu", "--cells-file", str(tmp_path / "cells.toml"), "--cache-dir",
                 str(tmp_path / "cache"), "--perf-file", str(tmp_path / "perf.jsonl")]) == 0
    (row,) = read_rows(tmp_path / "perf.jsonl")
    assert list(row["clocks_load"]) == ["bw24"] and row["clocks_load"]["bw24"]["sm_mhz_min"] >= 1000
    assert "  clocks: bw24 sm " in capsys.readouterr().out
