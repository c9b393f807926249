"""CLI contract: no GPU -> one clear line and exit code 2; bad usage -> exit 2; a GPU smoke run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bw24.probe import cli
from bw24.runtime import has_gpu, no_gpu_reason


def test_no_gpu_prints_one_line_and_exits_2(monkeypatch, capsys):
    import bw24.runtime as rt

    monkeypatch.setattr(rt, "has_gpu", lambda: False)
    monkeypatch.setattr(rt, "no_gpu_reason", lambda: "no CUDA device (test)")
    assert cli.main(["all"]) == cli.NO_GPU_EXIT
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "bw24-probe: no CUDA GPU: no CUDA device (test)\n"


def test_no_gpu_subprocess_hides_every_device():
    """End to end, as a user runs it: CUDA_VISIBLE_DEVICES='' hides any GPU, so this runs anywhere."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, "-m", "bw24.probe.cli", "bandwidth"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bw24-probe: no CUDA GPU: "), p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("argv", [["bogus"], ["all", "--repeats", "1"]])
def test_bad_usage_exits_2(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    assert rc == 2


def test_gpu_quick_run_writes_json(tmp_path, monkeypatch):
    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    monkeypatch.setenv("BW24_CEILINGS_DIR", str(tmp_path / "cache"))
    out = tmp_path / "probe.json"
    assert cli.main(["bandwidth", "latency", "mma", "--quick", "--repeats", "5", "--json", str(out)]) == 0
    r = json.loads(out.read_text())["results"]
    assert r["hbm_read_gbs"] > 50 and r["graph_node_us"] < r["launch_eager_us"]
    assert r["mma_int8_tops"] > r["mma_fp16_tflops"] > 1
