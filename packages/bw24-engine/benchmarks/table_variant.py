"""A variant of the committed tuning table with some matvec entries changed, for an A/B in the whole step
(h200_session.sh's `variant` stage, then `ab ... BW24_TUNING_DIR=/tmp/r/tables/NAME`):

    python packages/bw24-engine/benchmarks/table_variant.py OUT_DIR TYPE:NxK:FIELD=V[,FIELD=V] ... [--note TEXT]

e.g. `Q4_K:4096x4096:rows=8`: the 8B's output projection at 8 rows a block. FIELD is rows, warps or loads, each
with the values the kernels are built for (launch.QMV_SPACE, q8.QMV8_LOADS); the entry keeps its other fields, and a
shape the table lacks starts from its type's default. Writes OUT_DIR/<key>.json: the committed table (the one
bw24 reads without BW24_TUNING_DIR) with those entries replaced and a provenance record of the change, checked by
the reader bw24 uses (a table it could not read would make the A/B time the built-in defaults under its name).

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


def committed_table(key: str | None) -> dict:
    """The table bw24 reads without BW24_TUNING_DIR: key's, or the only one there when key is None."""
    files = sorted(COMMITTED.glob("*.json")) if key is None else [COMMITTED / f"{key}.json"]
    if len(files) != 1 or not files[0].is_file():
        raise ValueError(f"no single committed table to start from in {COMMITTED} (key {key!r}): pass --key")
    return read_table(files[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("changes", nargs="+", help="TYPE:NxK:FIELD=V[,FIELD=V]")
    ap.add_argument("--key", help="the device's table (default: the only committed one)")
    ap.add_argument("--note", default="", help="why: goes into the table's provenance")
    a = ap.parse_args(argv)
    try:
        changes = [parse_change(s) for s in a.changes]
        data = make_variant(committed_table(a.key), changes, a.note or " ".join(a.changes))
        path = write_variant(a.out, data)
    except ValueError as e:  # (TuningTableError is one)
        print(f"table_variant: {e}", file=sys.stderr)
        return 2
    for k, v in data["provenance"]["variant"]["entries"].items():
        print(f"{k}: {v['before']} -> {v['after']}")
    if any("warps" in f for _, _, f in changes):
        print("note: warps changes a row's summation order; run the gate with this table too")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
