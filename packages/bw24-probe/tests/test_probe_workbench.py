"""workbench/run_all.py (what `nox -s notebooks` runs): executes a real notebook in SMALL mode on the
CPU, and turns red on a notebook that raises (canary) or an unknown notebook name."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

WORKBENCH = Path(__file__).resolve().parents[3] / "workbench"


@pytest.fixture(scope="module")
def run_all():
    spec = importlib.util.spec_from_file_location("bw24_workbench_run_all", WORKBENCH / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def small(monkeypatch, tmp_path):
    monkeypatch.setenv("BW24_WB_SMALL", "1")  # CPU path even on a GPU host: this tests the machinery
    monkeypatch.setenv("PYTHONPATH", ":".join([str(WORKBENCH), *sys.path]))
    return tmp_path


def test_every_notebook_is_found(run_all):
    names = {p.stem for p in run_all.notebooks()}
    assert {"roofline", "tune_qmatvec", "tune_attention", "decode_timeline"} <= names
    assert "run_all" not in names and "_wb" not in names


def test_tune_qmatvec_runs_and_writes_a_valid_table(run_all, small):
    assert run_all.main(["tune_qmatvec", "--out", str(small)]) == 0
    table = json.loads((small / "tuning" / "cpu-reference-sm00.json").read_text())
    assert set(table["qmatvec"]) >= {"Q8_0", "Q4_K", "Q6_K"}
    assert (small / "tune_qmatvec.ipynb").is_file()


def test_failing_notebook_fails_the_run(run_all, small, capsys):
    """Canary: a notebook whose cell raises must make run_all exit 1 and name it."""
    folder = small / "nbs"
    folder.mkdir()
    (folder / "broken.py").write_text("# %%\nx = 1\n# %%\nraise ValueError('planted failure')\n")
    assert run_all.main(["--folder", str(folder), "--out", str(small / "o")]) == 1
    out = capsys.readouterr().out
    assert "FAIL  broken.py" in out and "planted failure" in out


def test_unknown_notebook_is_bad_usage(run_all, small):
    assert run_all.main(["no_such_notebook", "--out", str(small)]) == 2


def test_tune_qmatvec_other_shapes_keep_the_kind_default(run_all, small, monkeypatch):
    """BW24_WB_SHAPES sweeps another model's shapes: they join the table next to the shapes swept before,
    and a kind's default measured before is kept (a sweep of one model's shapes must not re-default every
    shape the table does not name); a malformed list fails the notebook, naming the variable."""
    assert run_all.main(["tune_qmatvec", "--out", str(small)]) == 0
    path = small / "tuning" / "cpu-reference-sm00.json"
    table = json.loads(path.read_text())
    marker = {**table["qmatvec"]["Q4_K"]["default"], "planted": 1}  # a default this sweep cannot produce
    table["qmatvec"]["Q4_K"]["default"] = marker
    path.write_text(json.dumps(table))
    monkeypatch.setenv("BW24_WB_QTYPES", "Q4_K")
    monkeypatch.setenv("BW24_WB_SHAPES", "128x256")
    assert run_all.main(["tune_qmatvec", "--out", str(small)]) == 0
    q4k = json.loads(path.read_text())["qmatvec"]["Q4_K"]
    assert q4k["default"] == marker and {"256x512", "128x256"} <= set(q4k["shapes"])
    monkeypatch.setenv("BW24_WB_SHAPES", "128by256")
    assert run_all.main(["tune_qmatvec", "--out", str(small)]) == 1
