"""benchmarks/table_variant.py: the committed tuning table with named matvec entries changed, for the session's
`variant` stage and an `ab ... BW24_TUNING_DIR=` against the committed table. The file it writes must be one bw24
reads (a table it ignored would time the built-in defaults under the variant's name), with exactly the named
entries changed."""

from __future__ import annotations

import json

import pytest

H200 = "nvidia-h200-sm90"


@pytest.fixture(scope="module")
def tv(helpers):
    return helpers.bench_module("table_variant")


def test_a_change_parses_and_a_bad_one_is_named(tv):
    assert tv.parse_change("Q4_K:4096x4096:rows=8,loads=4") == ("Q4_K", "4096x4096", {"rows": 8, "loads": 4})
    for bad, word in (("Q4_K:4096:rows=8", "TYPE:NxK"), ("Q4_K:4096x4096:rowz=8", "rowz"),
                      ("Q4_K:4096x4096:rows=3", "rows=3"), ("Q4_K:4096x4096:loads=x", "loads=x")):
        with pytest.raises(ValueError, match=word):
            tv.parse_change(bad)


def test_the_variant_is_a_table_the_engine_reads_with_only_the_named_entries_changed(tv, tmp_path):
    """The 8B's output projection back at 2 rows a block and its fused Q/K/V at 8 (one wave on 132 SMs): those two
    plans change, the shape the table lacked starts from its type's default, every other entry is the committed one.
    Canary: the committed table itself still plans its own rows for them (8 for the output projection since
    11bfbd6's run, 2 for Q/K/V)."""
    from bw24.engine.ops.cuda.launch import TUNING_DIR, QmvConfigs
    from bw24.runtime import load_tuning
    from gguf.constants import GGMLQuantizationType as Q

    base = tv.committed_table(H200)
    changes = [tv.parse_change(s) for s in ("Q4_K:4096x4096:rows=2", "Q4_K:6144x4096:rows=8",
                                            "Q8_0:7x9:warps=2")]
    path = tv.write_variant(tmp_path, tv.make_variant(base, changes, "a test"))
    assert path == tmp_path / "nvidia-h200-sm90.json"
    new = QmvConfigs(load_tuning(tmp_path, "nvidia-h200-sm90"))
    old = QmvConfigs(load_tuning(TUNING_DIR, "nvidia-h200-sm90"))
    assert old.plan(Q.Q4_K, 4096, 4096)[1:] == (4, 8) and new.plan(Q.Q4_K, 4096, 4096)[1:] == (4, 2)
    assert old.plan(Q.Q4_K, 6144, 4096)[1:] == (2, 4) and new.plan(Q.Q4_K, 6144, 4096)[1:] == (2, 8)
    for qt, n, k in ((Q.Q4_K, 24576, 4096), (Q.Q6_K, 4096, 12288), (Q.Q8_0, 4096, 4096)):
        assert new.plan(qt, n, k) == old.plan(qt, n, k) and new.loads(qt, n, k) == old.loads(qt, n, k)
    data = json.loads(path.read_text())
    assert data["qmatvec"]["Q8_0"]["shapes"]["7x9"] == {**base["qmatvec"]["Q8_0"]["default"], "warps": 2}
    assert data["provenance"]["variant"]["entries"]["Q4_K 4096x4096"] == {"before": {"rows": 8, "warps": 4},
                                                                        "after": {"rows": 2, "warps": 4}}
    base["provenance"].pop("variant", None)
    assert {k: v for k, v in data["provenance"].items() if k != "variant"} == base["provenance"]


def test_an_unknown_type_or_an_unreadable_result_is_refused(tv, tmp_path):
    from bw24.runtime.tuning import TuningTableError

    base = tv.committed_table(H200)
    with pytest.raises(ValueError, match="F16"):
        tv.make_variant(base, [("F16", "8x8", {"rows": 2})], "x")
    bad = tv.make_variant(base, [tv.parse_change("Q4_K:8x8:rows=2")], "x")
    bad["qmatvec"]["Q4_K"]["shapes"]["8x8"]["rows"] = 2.5  # a config bw24's reader rejects
    with pytest.raises(TuningTableError):
        tv.write_variant(tmp_path, bad)


def test_the_command_writes_the_file_or_exits_2_naming_the_problem(tv, tmp_path, capsys):
    assert tv.main([str(tmp_path / "a"), "Q4_K:4096x4096:rows=4", "--note", "two waves", "--key", H200]) == 0
    assert json.loads((tmp_path / "a" / "nvidia-h200-sm90.json").read_text())["provenance"]["variant"]["note"] == \
        "two waves"
    assert "{'rows': 8, 'warps': 4} -> {'rows': 4, 'warps': 4}" in capsys.readouterr().out
    assert tv.main([str(tmp_path / "b"), "Q4_K:4096x4096:rows=5", "--key", H200]) == 2
    assert "rows=5" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_the_base_is_the_committed_table_whatever_bw24_tuning_dir_says(tv):
    """launch.TUNING_DIR follows BW24_TUNING_DIR (read at import); the variant's base never does: a variant made
    inside an A/B's environment would otherwise stack its changes on the table under test."""
    from pathlib import Path

    import bw24.engine.ops.cuda.launch as launch

    assert tv.COMMITTED == Path(launch.__file__).resolve().parents[2] / "tuning"
    assert tv.committed_table(H200)["key"] == "nvidia-h200-sm90"


def test_the_base_is_the_running_gpus_table_and_none_without_a_gpu_is_named(tv, monkeypatch):
    """On the GPU host the base is the table bw24 reads there (the H100's on an H100: an H200 table written under
    the H200's key would make `BW24_TUNING_DIR` stop the A/B there); without a GPU and without --key, an error."""
    monkeypatch.setattr(tv, "running_key", lambda: "nvidia-h100-80gb-hbm3-sm90")
    assert tv.committed_table(None)["device"] == "NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(tv, "running_key", lambda: "nvidia-b200-sm100")
    with pytest.raises(ValueError, match="no committed table nvidia-b200-sm100.json .*nvidia-h200-sm90"):
        tv.committed_table(None)
    monkeypatch.setattr(tv, "running_key", lambda: None)
    with pytest.raises(ValueError, match="--key"):
        tv.committed_table(None)


def test_bare_is_the_built_in_defaults_under_the_devices_key(tv, tmp_path, capsys):
    """--bare: the key's table with no section, read back as bw24 reads it: every plan is default_qmv's and the
    attention has no table entry. Canary: the committed H100 table plans another geometry for one weight."""
    from bw24.engine.ops.cuda.launch import TUNING_DIR, QmvConfigs, default_qmv
    from bw24.runtime import load_tuning
    from gguf.constants import GGMLQuantizationType as Q

    key = "nvidia-h100-80gb-hbm3-sm90"
    assert tv.main([str(tmp_path), "--bare", "--key", key]) == 0
    bare = load_tuning(tmp_path, key)
    assert bare.config("attention", "decode") is None
    got, ref = QmvConfigs(bare), QmvConfigs(load_tuning(TUNING_DIR, key))
    assert got._entry("Q4_K", 4096, 4096) == default_qmv(4096, 4096)
    assert any(got.plan(Q.Q4_K, n, k) != ref.plan(Q.Q4_K, n, k) for n, k in ((4096, 4096), (6144, 4096),
                                                                                 (24576, 4096), (4096, 12288)))
    assert tv.main([str(tmp_path / "x"), "--bare", "Q4_K:4096x4096:rows=8", "--key", key]) == 2
    assert tv.main([str(tmp_path / "y"), "--key", key]) == 2
    assert "not both" in capsys.readouterr().err
