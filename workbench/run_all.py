"""Execute every workbench notebook (jupytext percent .py -> nbclient) and fail on any error.

    python workbench/run_all.py [NAME ...] [--out DIR] [--timeout S]

Without a GPU (or with BW24_WB_SMALL=1) each notebook runs its SMALL mode: CPU, reference backend,
tiny shapes, outputs under --out (a temp dir by default), never over committed tables. Exit code:
0 all passed, 1 a notebook failed (its failing cell is printed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def notebooks(folder: Path = HERE) -> list[Path]:
    """Every percent-format notebook in the folder (helpers start with '_'; this runner is not one)."""
    return sorted(p for p in folder.glob("*.py") if p.name != "run_all.py" and not p.name.startswith("_"))


def execute(path: Path, out_dir: Path, timeout: int = 900) -> Path:
    """Run one notebook top to bottom in a fresh kernel; write the executed .ipynb; raise on error."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    finally:
        out = out_dir / f"{path.stem}.ipynb"
        nbformat.write(nb, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="notebook names (default: all)")
    ap.add_argument("--out", type=Path, help="where executed notebooks and their outputs go")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    ap.add_argument("--folder", type=Path, default=HERE, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    found = {p.stem: p for p in notebooks(args.folder)}
    unknown = [n for n in args.names if n.removesuffix(".py") not in found]
    if unknown:
        print(f"run_all: unknown notebook(s) {unknown}; have {sorted(found)}", file=sys.stderr)
        return 2
    chosen = [found[n.removesuffix(".py")] for n in args.names] or list(found.values())
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bw24-workbench-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ["BW24_WB_OUT"] = str(out_dir)  # the kernels inherit it: where notebooks write
    # Kernels start in the notebook's folder: make relative PYTHONPATH entries absolute first.
    if os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            str(Path(e).resolve()) for e in os.environ["PYTHONPATH"].split(os.pathsep) if e)
    failed = []
    for p in chosen:
        t0 = time.perf_counter()
        try:
            execute(p, out_dir, args.timeout)
            print(f"OK    {p.name} ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:  # CellExecutionError carries the cell and traceback
            failed.append(p.name)
            print(f"FAIL  {p.name} ({time.perf_counter() - t0:.1f} s)\n{e}", flush=True)
    print(f"{len(chosen) - len(failed)}/{len(chosen)} notebooks passed; executed copies in {out_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
