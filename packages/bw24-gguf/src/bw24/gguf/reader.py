"""Memory-mapped GGUF reading: GGUFFile over gguf.GGUFReader, zero-copy tensor views.

GGUFReader parses metadata arrays one element at a time (3 s for a 49k vocab, ~10 s for a
150k one), so the key/value section is parsed here with a flat loop; the header, tensor table
and data views are still GGUFReader's.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType
from gguf.gguf_reader import ReaderField

from .errors import GGUFError, MissingTensorError, NotGGUFError, TruncatedGGUFError, UnknownQuantTypeError

_MAGIC = struct.pack("<I", GGUF_MAGIC)  # b"GGUF"
# GGUF scalar value types -> (struct code, numpy dtype)
_SCALARS: dict[int, tuple[str, Any]] = {
    GGUFValueType.UINT8: ("B", np.uint8), GGUFValueType.INT8: ("b", np.int8),
    GGUFValueType.UINT16: ("H", np.uint16), GGUFValueType.INT16: ("h", np.int16),
    GGUFValueType.UINT32: ("I", np.uint32), GGUFValueType.INT32: ("i", np.int32),
    GGUFValueType.FLOAT32: ("f", np.float32), GGUFValueType.BOOL: ("?", np.bool_),
    GGUFValueType.UINT64: ("Q", np.uint64), GGUFValueType.INT64: ("q", np.int64),
    GGUFValueType.FLOAT64: ("d", np.float64),
}
_KNOWN_QTYPES = {int(t) for t in GGMLQuantizationType}


def _decode(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:  # keep the bytes recoverable (tokenizer pieces)
        return b.decode("utf-8", errors="surrogateescape")


class _Reader(GGUFReader):
    """GGUFReader with bounds checks (typed truncation errors) and a fast metadata parser."""

    def __init__(self, path: Path):
        self.values: dict[str, Any] = {}
        self._path = path
        super().__init__(path, mode="r")

    def _get(self, offset, dtype, count=1, override_order=None):
        itemsize = np.dtype(dtype).itemsize
        if offset + itemsize * int(count) > len(self.data):
            raise TruncatedGGUFError(
                f"{self._path}: truncated GGUF: needs bytes up to offset {offset + itemsize * int(count)}, "
                f"file has {len(self.data)}"
            )
        return super()._get(offset, dtype, count, override_order)

    def _need(self, end: int) -> None:
        if end > len(self.data):
            raise TruncatedGGUFError(
                f"{self._path}: truncated GGUF metadata (needs offset {end}, file has {len(self.data)} bytes)"
            )

    def _build_fields(self, offs: int, count: int) -> int:
        if self.byte_order != "I":
            raise GGUFError(f"{self._path}: big-endian GGUF files are not supported")
        buf = memoryview(self.data)
        for _ in range(int(count)):
            start = offs
            self._need(offs + 8)
            (klen,) = struct.unpack_from("<Q", buf, offs)
            self._need(offs + 12 + klen)
            key = _decode(bytes(buf[offs + 8 : offs + 8 + klen]))
            offs += 8 + klen
            (vtype,) = struct.unpack_from("<I", buf, offs)
            offs += 4
            value, offs, types = self._parse_value(buf, offs, vtype)
            self.values[key] = value
            # A light ReaderField: scalars keep GGUFReader's layout (general.alignment is read from it).
            parts = [np.array([value], dtype=_SCALARS[vtype][1])] if vtype in _SCALARS else []
            self._push_field(ReaderField(start, key, parts, [0], types), skip_sum=True)
        return offs

    def _parse_value(self, buf, offs: int, vtype: int):
        if vtype in _SCALARS:
            code, dt = _SCALARS[vtype]
            size = np.dtype(dt).itemsize
            self._need(offs + size)
            (v,) = struct.unpack_from("<" + code, buf, offs)
            return v, offs + size, [GGUFValueType(vtype)]
        if vtype == GGUFValueType.STRING:
            self._need(offs + 8)
            (n,) = struct.unpack_from("<Q", buf, offs)
            self._need(offs + 8 + n)
            return _decode(bytes(buf[offs + 8 : offs + 8 + n])), offs + 8 + n, [GGUFValueType.STRING]
        if vtype == GGUFValueType.ARRAY:
            self._need(offs + 12)
            itype, n = struct.unpack_from("<IQ", buf, offs)
            offs += 12
            types = [GGUFValueType.ARRAY, GGUFValueType(itype)] if itype in GGUFValueType._value2member_map_ else []
            if itype in _SCALARS:
                dt = np.dtype(_SCALARS[itype][1]).newbyteorder("<")
                end = offs + n * dt.itemsize
                self._need(end)
                return np.frombuffer(buf[offs:end], dtype=dt).tolist(), end, types
            if itype == GGUFValueType.STRING:
                out = []
                unpack = struct.Struct("<Q").unpack_from
                for _ in range(n):
                    self._need(offs + 8)
                    (sl,) = unpack(buf, offs)
                    self._need(offs + 8 + sl)
                    out.append(_decode(bytes(buf[offs + 8 : offs + 8 + sl])))
                    offs += 8 + sl
                return out, offs, types
            if itype == GGUFValueType.ARRAY:  # each element carries its own (type, count) header
                out = []
                for _ in range(n):
                    v, offs, _t = self._parse_value(buf, offs, GGUFValueType.ARRAY)
                    out.append(v)
                return out, offs, types
        raise GGUFError(f"{self._path}: unknown GGUF metadata value type {vtype} at offset {offs}")

    def _build_tensors(self, start_offs: int, fields: list[ReaderField]) -> None:
        # Check types and extents first so the error names the tensor.
        size = len(self.data)
        for field in fields:
            _nl, name_data, _nd, dims, raw_dtype, offset_tensor = field.parts
            name = _decode(bytes(name_data))
            tid = int(raw_dtype[0])
            if tid not in _KNOWN_QTYPES or GGMLQuantizationType(tid) not in GGML_QUANT_SIZES:
                raise UnknownQuantTypeError(
                    f"{self._path}: tensor {name!r} has unknown ggml quant type id {tid}"
                )
            block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(tid)]
            n_el = int(np.prod(dims.astype(np.int64))) if len(dims) else 1
            end = start_offs + int(offset_tensor[0]) + n_el // block * tsize
            if end > size:
                raise TruncatedGGUFError(
                    f"{self._path}: truncated GGUF: tensor {name!r} data ends at byte {end}, file has {size}"
                )
        super()._build_tensors(start_offs, fields)


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """One tensor: shape in numpy row-major order (reversed ggml ne), raw = zero-copy bytes."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    raw: np.ndarray  # uint8 view into the mmap
    nbytes: int
    offset: int  # absolute byte offset of the data in the file

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def dequantize(self) -> np.ndarray:
        from .dequant import dequantize

        return dequantize(self.raw, self.qtype, self.shape)

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.qtype.name}, shape={self.shape}, nbytes={self.nbytes})"


class GGUFFile:
    """A GGUF file opened memory-mapped. Metadata as plain python, tensors as zero-copy views."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such GGUF file: {self.path}")
        size = self.path.stat().st_size
        with open(self.path, "rb") as fh:
            head = fh.read(4)
        if size == 0:
            raise NotGGUFError(f"{self.path}: empty file, not a GGUF file")
        if head != _MAGIC:
            if len(head) < 4 and _MAGIC.startswith(head):
                raise TruncatedGGUFError(f"{self.path}: truncated GGUF ({size} bytes)")
            raise NotGGUFError(f"{self.path}: not a GGUF file (magic {head!r}, expected {_MAGIC!r})")
        try:
            self._reader = _Reader(self.path)
        except GGUFError:
            raise
        except (ValueError, IndexError, KeyError) as e:  # anything else gguf rejects
            raise GGUFError(f"{self.path}: malformed GGUF: {e}") from e
        self._meta = self._reader.values
        self.tensors: dict[str, TensorInfo] = {}
        data = self._reader.data
        for t in self._reader.tensors:
            raw = data[t.data_offset : t.data_offset + t.n_bytes].view(np.ndarray)
            self.tensors[t.name] = TensorInfo(
                name=t.name,
                qtype=GGMLQuantizationType(t.tensor_type),
                shape=tuple(int(d) for d in reversed(t.shape.tolist())),
                raw=raw,
                nbytes=int(t.n_bytes),
                offset=int(t.data_offset),
            )
        self.arch: str = str(self.get("general.architecture", ""))
        self.version: int = int(self._reader.fields["GGUF.version"].parts[0][0])
        self.alignment: int = int(self._reader.alignment)
        self.data_offset: int = int(self._reader.data_offset)

    @property
    def metadata(self) -> dict[str, Any]:
        """All key/values (a shallow copy) in file order."""
        return dict(self._meta)

    def keys(self) -> list[str]:
        return list(self._meta)

    def get(self, key: str, default: Any = None) -> Any:
        return self._meta.get(key, default)

    def arch_get(self, suffix: str, default: Any = None) -> Any:
        return self._meta.get(f"{self.arch}.{suffix}", default)

    def value_type(self, key: str) -> tuple[GGUFValueType, GGUFValueType | None]:
        """Stored GGUF type of a key: (type, element type for arrays else None)."""
        types = self._reader.fields[key].types
        return types[0], (types[1] if len(types) > 1 else None)

    def has_tensor(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise MissingTensorError(f"{self.path}: no tensor named {name!r} ({len(self.tensors)} tensors in file)") from None

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, arch={self.arch!r}, tensors={len(self.tensors)})"
