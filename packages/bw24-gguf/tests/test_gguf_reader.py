"""GGUFFile: metadata, zero-copy tensor views, and a typed error for each kind of bad file."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from bw24.gguf import (
    GGUFError,
    GGUFFile,
    MissingTensorError,
    NotGGUFError,
    TruncatedGGUFError,
    UnknownQuantTypeError,
)
from gguf import GGMLQuantizationType as Q


def _small(make_gguf, q8_0):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    qraw = q8_0(np.full((2, 2), 0.5, np.float32), np.arange(128).reshape(2, 64) - 64)
    return make_gguf(
        kv={"llama.block_count": 2, "llama.rope.freq_base": 5e5, "general.name": "tiny", "x.flag": True,
            "x.list": [1, 2, 3], "x.strs": ["a", "bé", ""]},
        tensors={"a.weight": w, "q.weight": (qraw, (2, 64), Q.Q8_0)},
    ), w, qraw


def test_metadata_and_tensors(make_gguf, q8_0):
    path, w, qraw = _small(make_gguf, q8_0)
    f = GGUFFile(path)
    assert f.arch == "llama"
    assert f.get("general.name") == "tiny"
    assert f.arch_get("block_count") == 2
    assert f.arch_get("rope.freq_base") == pytest.approx(5e5)
    assert f.get("x.flag") is True
    assert f.get("x.list") == [1, 2, 3]
    assert f.get("x.strs") == ["a", "bé", ""]
    assert f.get("nope", 7) == 7
    assert list(f.tensors) == ["a.weight", "q.weight"]
    a = f.tensor("a.weight")
    assert a.qtype == Q.F32 and a.shape == (3, 5) and a.nbytes == 60
    np.testing.assert_array_equal(a.raw.view(np.float32).reshape(3, 5), w)
    q = f.tensor("q.weight")
    assert q.qtype == Q.Q8_0 and q.shape == (2, 64) and q.nbytes == 2 * 2 * 34
    np.testing.assert_array_equal(q.raw.reshape(2, 68), qraw)
    assert f.has_tensor("q.weight") and not f.has_tensor("zzz")


def test_raw_is_zero_copy_view_of_the_mmap(make_gguf, q8_0):
    path, _, _ = _small(make_gguf, q8_0)
    f = GGUFFile(path)
    t = f.tensor("q.weight")
    assert t.raw.dtype == np.uint8 and not t.raw.flags.owndata
    with open(path, "rb") as fh:
        fh.seek(t.offset)
        assert fh.read(t.nbytes) == t.raw.tobytes()


def test_metadata_matches_gguf_reader_on_real_file(smollm2_path):
    import gguf

    f = GGUFFile(smollm2_path)
    r = gguf.GGUFReader(smollm2_path)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert keys == f.keys()
    for k in keys:
        assert f.get(k) == r.fields[k].contents(), k
    assert len(f.tensors) == len(r.tensors) == 272
    assert f.tensor("blk.0.ffn_down.weight").shape == (576, 1536)


def test_not_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(NotGGUFError, match="not a GGUF file"):
        GGUFFile(p)
    p.write_bytes(b"")
    with pytest.raises(NotGGUFError, match="empty"):
        GGUFFile(p)


def test_truncated_header_and_data(make_gguf, q8_0, tmp_path):
    path, _, _ = _small(make_gguf, q8_0)
    blob = path.read_bytes()
    f = GGUFFile(path)
    t = f.tensor("q.weight")
    cut = tmp_path / "cut_data.gguf"
    cut.write_bytes(blob[: t.offset + 10])
    with pytest.raises(TruncatedGGUFError, match="'q.weight'"):
        GGUFFile(cut)
    for n in (2, 20, 60):  # inside the magic, the counts, the metadata
        cut.write_bytes(blob[:n])
        with pytest.raises(TruncatedGGUFError):
            GGUFFile(cut)
    assert issubclass(TruncatedGGUFError, GGUFError) and issubclass(GGUFError, ValueError)


def test_unknown_quant_type_names_its_id(make_gguf, q8_0, tmp_path):
    path, _, _ = _small(make_gguf, q8_0)
    blob = bytearray(path.read_bytes())
    # tensor info of q.weight: name, n_dims=2, dims (2 x u64), type u32, offset u64
    name = b"q.weight"
    i = blob.index(struct.pack("<Q", len(name)) + name) + 8 + len(name) + 4 + 16
    assert struct.unpack_from("<I", blob, i)[0] == int(Q.Q8_0)
    struct.pack_into("<I", blob, i, 77)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(blob))
    with pytest.raises(UnknownQuantTypeError, match=r"'q.weight'.*id 77"):
        GGUFFile(bad)


def test_missing_tensor_names_it(make_gguf, q8_0):
    path, _, _ = _small(make_gguf, q8_0)
    with pytest.raises(MissingTensorError, match="output.weight"):
        GGUFFile(path).tensor("output.weight")
