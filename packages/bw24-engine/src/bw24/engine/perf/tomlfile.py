"""The committed TOML files of the bench (cells.toml, targets.toml): a list of `[[KEY]]` tables, read with errors
that name the file."""

from __future__ import annotations

from pathlib import Path

from .errors import PerfError

try:
    import tomllib
except ImportError:  # python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def toml_tables(path: str | Path, key: str, error: type[PerfError], what: str) -> tuple[Path, list[dict]]:
    """The file's `[[key]]` tables; error (a PerfError) when it is missing, not TOML, or has none."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{what} file {p} does not exist")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise error(f"{p}: not valid TOML ({e})") from None
    raw = data.get(key)
    if not isinstance(raw, list) or not raw:
        raise error(f"{p}: no [[{key}]] tables")
    return p, raw
