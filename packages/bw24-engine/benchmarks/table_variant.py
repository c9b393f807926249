"""A variant of the committed tuning table with some matvec entries changed, for an A/B in the whole step
(h200_session.sh's `variant` stage, then `ab ... BW24_TUNING_DIR=/tmp/r/tables/NAME`):

    python packages/bw24-engine/benchmarks/table_variant.py OUT_DIR TYPE:NxK:FIELD=V[,FIELD=V] ... [--note TEXT]
    python packages/bw24-engine/benchmarks/table_variant.py OUT_DIR --bare     # this device's key, no entries

e.g. `Q4_K:4096x4096:rows=8`: the 8B's output projection at 8 rows a block. FIELD is rows, warps or loads, each
with the values the kernels are built for (launch.QMV_SPACE, q8.QMV8_LOADS); the entry keeps its other fields, and a
shape the table lacks starts from its type's default. Writes OUT_DIR/<key>.json: the committed table (the one
bw24 reads without BW24_TUNING_DIR) with those entries replaced and a provenance record of the change, checked by
the reader bw24 uses (a table it could not read would make the A/B time the built-in defaults under its name).
The base is the table of the GPU it runs on (its device key; --key names another, e.g. on a machine without a GPU).
`--bare` writes that key's table with no entries at all: the built-in defaults, as an A/B's other arm where the
committed table is the one under test (e.g. the H100's, copied from the H200's).

Why a tool and not a hand-edited copy: the variant is the committed table at the commit under test plus exactly
the named changes, written on the GPU host from that commit, so the A/B compares one thing. rows (R) regroups a
matvec's rows and keeps every bit (the summation order depends on W and K only, launch.py); warps (W) changes a
row's order, so a variant with it needs the run-gen gate as well; loads keeps the bits (kernel-check's
`q8 decode loads` cases).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import bw24.engine
from bw24.engine.ops.cuda.launch import QMV_SPACE
from bw24.engine.ops.cuda.q8 import QMV8_LOADS
from bw24.runtime.tuning import read_table

# the tables bw24 reads when BW24_TUNING_DIR is unset (launch.TUNING_DIR follows that variable: a variant made while it
# is set must still start from the committed table)
COMMITTED = Path(bw24.engine.__file__).resolve().parent / "tuning"
FIELDS = {"rows": tuple(QMV_SPACE["rows"]), "warps": tuple(QMV_SPACE["warps"]), "loads": QMV8_LOADS}
_SPEC = re.compile(r"^([A-Z0-9_]+):(\d+x\d+):(.+)$")


def parse_change(spec: str) -> tuple[str, str, dict[str, int]]:
    """'Q4_K:4096x4096:rows=8,loads=4' -> ('Q4_K', '4096x4096', {'rows': 8, 'loads': 4}); ValueError naming
    what is wrong."""
    m = _SPEC.match(spec)
    if not m:
        raise ValueError(f"{spec!r}: use TYPE:NxK:FIELD=V[,FIELD=V], e.g. Q4_K:4096x4096:rows=8")
    qtype, shape, body = m.groups()
    fields: dict[str, int] = {}
    for kv in body.split(","):
        k, _, v = kv.partition("=")
        if k not in FIELDS:
            raise ValueError(f"{spec!r}: field {k!r} is not one of {', '.join(FIELDS)}")
        if not v.isdigit() or int(v) not in FIELDS[k]:
            raise ValueError(f"{spec!r}: {k}={v} is not one of {', '.join(map(str, FIELDS[k]))}")
        fields[k] = int(v)
    return qtype, shape, fields


def make_variant(table: dict, changes: list[tuple[str, str, dict[str, int]]], note: str) -> dict:
    """A copy of table with each change merged into its (type, shape) entry and a provenance record of them."""
    data = json.loads(json.dumps(table))  # deep copy
    q = data.get("qmatvec", {})
    record = {}
    for qtype, shape, fields in changes:
        if qtype not in q:
            raise ValueError(f"{qtype}: the table has no matvec entry for that type (it has {', '.join(sorted(q))})")
        shapes = q[qtype].setdefault("shapes", {})
        before = dict(shapes.get(shape, q[qtype]["default"]))
        shapes[shape] = {**before, **fields}
        record[f"{qtype} {shape}"] = {"before": before, "after": shapes[shape]}
    data.setdefault("provenance", {})["variant"] = {"script": "packages/bw24-engine/benchmarks/table_variant.py",
                                                     "note": note, "entries": record}
    return data


def write_variant(out: Path, data: dict) -> Path:
    """data as out/<key>.json, read back through the runtime's reader (TuningTableError if it would be ignored)."""
    path = Path(out) / f"{data['key']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    read_table(path)
    return path


def running_key() -> str | None:
    """The device key of the GPU this runs on (bw24 reads <key>.json there), None without a GPU."""
    from bw24.runtime import device_info, device_key, has_gpu

    if not has_gpu():
        return None
    d = device_info()
    return device_key(d.name, d.cc)


def committed_table(key: str | None) -> dict:
    """The table bw24 reads without BW24_TUNING_DIR for key (None: this GPU's; ValueError without one)."""
    key = key or running_key()
    if key is None:
        raise ValueError("no GPU here to take the device key from: pass --key")
    path = COMMITTED / f"{key}.json"
    if not path.is_file():
        have = ", ".join(p.stem for p in sorted(COMMITTED.glob("*.json")))
        raise ValueError(f"no committed table {path.name} in {COMMITTED} (there: {have})")
    return read_table(path)


def bare_table(table: dict, note: str) -> dict:
    """table's device fields only: no section, so every lookup falls to the built-in defaults."""
    data = {k: table[k] for k in ("schema", "device", "cc", "key")}
    data["provenance"] = {"variant": {"script": "packages/bw24-engine/benchmarks/table_variant.py", "bare": True,
                                      "note": note or "the built-in defaults (no entries)"}}
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("changes", nargs="*", help="TYPE:NxK:FIELD=V[,FIELD=V]")
    ap.add_argument("--key", help="the device's table (default: the GPU this runs on)")
    ap.add_argument("--bare", action="store_true", help="no entries: the built-in defaults under this device's key")
    ap.add_argument("--note", default="", help="why: goes into the table's provenance")
    a = ap.parse_intermixed_args(argv)  # (changes after an option, too)
    if bool(a.changes) == a.bare:
        print("table_variant: give changes or --bare (not both)", file=sys.stderr)
        return 2
    try:
        changes = [parse_change(s) for s in a.changes]
        base = committed_table(a.key)
        data = bare_table(base, a.note) if a.bare else make_variant(base, changes, a.note or " ".join(a.changes))
        path = write_variant(a.out, data)
    except ValueError as e:  # (TuningTableError is one)
        print(f"table_variant: {e}", file=sys.stderr)
        return 2
    for k, v in data["provenance"]["variant"].get("entries", {}).items():
        print(f"{k}: {v['before']} -> {v['after']}")
    if any("warps" in f for _, _, f in changes):
        print("note: warps changes a row's summation order; run the gate with this table too")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
