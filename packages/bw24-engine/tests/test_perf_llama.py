"""llama-bench arm: the flags, parsing its -o json, and A B A B interleaving with a fake llama-bench."""

from __future__ import annotations

import json
import stat
import sys

import pytest
from bw24.engine.perf.cells import Cell
from bw24.engine.perf.errors import LlamaBenchError
from bw24.engine.perf.llama import LlamaBench, llama_bench_args, parse_llama_bench_json
from bw24.engine.perf.runner import interleave, interleave_blocks

DEC = Cell("qwen3-8b", "q4_k_m", "decode", depth=4096, tokens=128)
PRE = Cell("qwen3-8b", "q4_k_m", "prefill", depth=0, tokens=512)
# the shape of llama-bench's json printer (tools/llama-bench/llama-bench.cpp): a list of tests
SAMPLE = json.dumps([{"build_commit": "abc1234", "build_number": 7000, "gpu_info": "NVIDIA H200",
                      "n_prompt": 0, "n_gen": 128, "n_depth": 4096, "flash_attn": True, "avg_ts": 230.5,
                      "stddev_ts": 0.4, "samples_ts": [230.5]},
                     {"build_commit": "abc1234", "n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 8800.0}])


def test_args():
    assert llama_bench_args("lb", "m.gguf", DEC) == ["lb", "-m", "m.gguf", "-p", "0", "-n", "128", "-d", "4096",
                                                    "-fa", "1", "-ngl", "99", "-r", "1", "-o", "json"]
    assert llama_bench_args("lb", "m.gguf", PRE, 5)[3:10] == ["-p", "512", "-n", "0", "-d", "0", "-fa"]
    with pytest.raises(LlamaBenchError, match="speculative"):
        llama_bench_args("lb", "m.gguf", Cell("x", "q8_0", "spec"))


def test_parse_picks_the_cells_test():
    assert parse_llama_bench_json("ggml_cuda_init: found 1 device\n" + SAMPLE, DEC)["avg_ts"] == 230.5
    assert parse_llama_bench_json(SAMPLE, PRE)["avg_ts"] == 8800.0
    with pytest.raises(LlamaBenchError, match="n_depth=0"):
        parse_llama_bench_json(SAMPLE, Cell("qwen3-8b", "q4_k_m", "decode", depth=0, tokens=128))
    with pytest.raises(LlamaBenchError, match="not JSON"):
        parse_llama_bench_json("| model | size |", DEC)


def fake_llama_bench(tmp_path, rc=0):
    """A llama-bench stand-in: logs its argv, answers one test in the -o json format."""
    log = tmp_path / "calls.log"
    script = tmp_path / "llama-bench"
    script.write_text(f"""#!{sys.executable}
import json, sys
a = sys.argv[1:]
open({str(log)!r}, "a").write(" ".join(a) + "\\n")
get = lambda f: int(a[a.index(f) + 1])
n = sum(1 for _ in open({str(log)!r}))
print("load_backend: fake", file=sys.stderr)
ts = [100.0 + n + i / 10 for i in range(get("-r"))]
print(json.dumps([{{"build_commit": "fake123", "gpu_info": "Fake GPU", "n_prompt": get("-p"), "n_gen": get("-n"),
                   "n_depth": get("-d"), "avg_ts": sum(ts) / len(ts), "samples_ts": ts}}]))
sys.exit({rc})
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def bw24_arm(events: list[str]):
    """A stand-in for bw24's rep: logs "A" and returns 300 tok/s."""
    def a():
        events.append("A")
        return 300.0
    return a


def test_interleaved_with_fake_llama_bench(tmp_path):
    script, log = fake_llama_bench(tmp_path)
    lb = LlamaBench(script, tmp_path / "m.gguf", DEC)
    events: list[str] = []
    a = bw24_arm(events)

    def b():
        events.append(f"B{sum(1 for _ in open(log)) if log.exists() else 0}")
        v = lb.rep()
        events.append(f"B{sum(1 for _ in open(log))}")
        return v

    ours, theirs = interleave(a, b, 5)
    assert events == ["A", "B0", "B1", "A", "B1", "B2", "A", "B2", "B3", "A", "B3", "B4", "A", "B4", "B5"]
    assert theirs == [101.0, 102.0, 103.0, 104.0, 105.0] and ours == [300.0] * 5
    calls = log.read_text().splitlines()
    assert all(c == f"-m {tmp_path / 'm.gguf'} -p 0 -n 128 -d 4096 -fa 1 -ngl 99 -r 1 -o json" for c in calls)
    assert lb.info["build_commit"] == "fake123"


def test_failing_llama_bench_is_a_typed_error(tmp_path):
    script, _ = fake_llama_bench(tmp_path, rc=3)
    with pytest.raises(LlamaBenchError, match="exited 3"):
        LlamaBench(script, tmp_path / "m.gguf", DEC).rep()
    with pytest.raises(LlamaBenchError, match="not a file"):
        LlamaBench(tmp_path / "missing", tmp_path / "m.gguf", DEC)


def test_blocks_run_one_llama_process_per_block(tmp_path):
    """--llama-block 3 with 5 reps: A A A, then llama-bench -r 3 (3 samples), A A, then -r 2."""
    script, log = fake_llama_bench(tmp_path)
    lb = LlamaBench(script, tmp_path / "m.gguf", DEC)
    events: list[str] = []
    a = bw24_arm(events)

    def b(n):
        events.append(f"B{n}")
        return lb.samples(n)

    ours, theirs = interleave_blocks(a, b, 5, 3)
    assert events == ["A", "A", "A", "B3", "A", "A", "B2"]
    assert ours == [300.0] * 5 and theirs == [101.0, 101.1, 101.2, 102.0, 102.1]
    assert [c.split(" -r ")[1] for c in log.read_text().splitlines()] == ["3 -o json", "2 -o json"]
    with pytest.raises(ValueError, match="block 0"):
        interleave_blocks(a, b, 5, 0)


def test_block_without_enough_samples_is_a_typed_error(tmp_path):
    script = tmp_path / "llama-bench"
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps([{{'n_prompt': 0, 'n_gen': 128, "
                      "'n_depth': 4096, 'avg_ts': 1.0, 'samples_ts': [1.0]}]))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(LlamaBenchError, match="3 numeric samples_ts"):
        LlamaBench(script, tmp_path / "m.gguf", DEC).samples(3)


def test_vram_sampler_reports_the_peak_above_entry(monkeypatch):
    """llama-bench's peak VRAM: polled device use while the block runs, minus the use at entry."""
    import time

    from bw24.engine.perf import llama as L

    level = {"v": 10 << 30}
    monkeypatch.setattr(L, "device_used_bytes", lambda: level["v"])
    with L.VramSampler(every=0.001) as s:
        for v in (11 << 30, 13 << 30, 12 << 30):  # the process allocates, peaks, frees some
            level["v"] = v
            time.sleep(0.03)
    assert s.value == 3 << 30
    monkeypatch.setattr(L, "device_used_bytes", lambda: None)  # no GPU: no figure, no thread
    with L.VramSampler() as s:
        pass
    assert s.value is None
