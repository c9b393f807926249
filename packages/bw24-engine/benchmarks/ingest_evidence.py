"""Bring one GPU session's logs (h200_session.sh's /tmp/r, unpacked from its `pack` tarball) into the repository
under the names the evidence folder uses, and its perf rows into benchmarks/perf.jsonl.

    python packages/bw24-engine/benchmarks/ingest_evidence.py R_DIR SHA [--dry-run]

- perf rows: R_DIR/perf.jsonl must start with the committed benchmarks/perf.jsonl (the host appended to a copy
  of it); the rows after that prefix are appended. Anything else is an error that names the first differing
  line, and nothing is written.
- logs: kernel_check.log, pytest_gpu.log (pytest_gpu_k_*.log: a selection), run_gen_*.log, perf_*.log, profile.log, spec_*.log (+ their
  spec_bench.jsonl), stages.log, mvsweep.log, vsweep.log, moe_decode.log, overlap.log, attn_sweep.log, knockout.log, loop_gap.log,
  mvbench.log (+ its mvbench.json), stream_probe.log (+ its stream_probe/stream_probe.json), dequant.log (+ its
  dequant/dequant.json), ncu_*.txt, and each chain's bg_NAME.out (bg_NAME_<gpu>_<SHA>.txt) at the top of R_DIR; the same
  under a `with` stage's VAR_VALUE folder, whose name becomes a suffix (BW24_ATTN_MMA_1 -> _attn_mma). Each lands
  as <stem>_h200_<SHA>[_suffix].<ext> in packages/bw24-engine/evidence, with a "# device: ...; date; git" first
  line added where the log lacks one (profile.log: the torch profiler's warnings dropped). h200 stands for the GPU
  the logs name (gpu_tag: h100 on an H100; --device overrides it).
- the probe stage's probe.log and probe/ceilings.json (probe_h200_<SHA>.log, ceilings_h200_<SHA>.json).
- the `variant` stage's tables/NAME/<key>.json and tables_NAME.log (tuning_h200_<SHA>_variant_NAME.json / .log).
- the `loads` stage's loads/qmv8_loads.log and loads/summary.txt (qmv8_loads[_summary]_h200_<SHA>), and its
  candidate table loads/table/<key>.json as tuning_h200_<SHA>_loads_candidate_<key>.json (as it is, no header).
- as they are (JSON, no header): a `profile` stage's per-model profile/*.json into profile_<SHA>[_suffix]/ (what
  `python -m bw24.engine.perf.breakdown` reads), and a `wb` stage's nb/*.json tuning table as
  tuning_h200_<SHA>[_suffix]_<name>.json beside its nb/<notebook>.log (wb_<notebook>_h200_<SHA>[_suffix].log).
- the modules kernel-check and the GPU pytest loaded (R_DIR/kernel_manifest.jsonl, recorded through
  kernels.MANIFEST_ENV): merged into benchmarks/kernel_manifest_h200.jsonl (once each, sorted), which
  warm_kernels.py compiles on every core before the next session's chain.
- a log whose first line names another commit (`git: X`) is left out and said so: the host's /tmp can outlive a
  session (h200_session.sh's setup clears /tmp/r since e223fb5's, whose pack held f020fd1's logs).

Then regenerate the README's tables: python -m bw24.engine.cli bench --table --targets benchmarks/targets.toml --write README.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EVIDENCE = ROOT / "packages" / "bw24-engine" / "evidence"
PERF = ROOT / "benchmarks" / "perf.jsonl"
MANIFEST = ROOT / "packages" / "bw24-engine" / "benchmarks" / "kernel_manifest_h200.jsonl"
_WARN = re.compile(r"UserWarning|warnings\.warn|_warn_once")


def suffix_of(folder: str) -> str:
    """A `with` stage's folder (VAR_VALUE) as a file-name suffix: BW24_ATTN_MMA_1 -> _attn_mma,
    BW24_UBATCH_2048 -> _ubatch_2048, BW24_PDL_0 -> _pdl_0, BW24_ATTN_DECODE_32:66 -> _attn_decode_32x66 (as the
    perf rows' variant: no ':' in a file name)."""
    name = folder[5:] if folder.startswith("BW24_") else folder
    name = name.lower().replace(":", "x")
    return "_" + (name[:-2] if name.endswith("_1") else name)


def gpu_tag(device: str) -> str:
    """The GPU's short name in evidence file names: 'NVIDIA H200' -> h200, 'NVIDIA H100 80GB HBM3' -> h100 (the first
    word that is a letter and digits), else the whole name as a slug. Why: at e3a8180 an H100 came for the H200, and
    its logs must not be filed under h200 names beside the H200's."""
    words = re.findall(r"[a-z0-9]+", device.lower())
    return next((w for w in words if re.fullmatch(r"[a-z]{1,2}\d{2,4}[a-z]?", w)), "-".join(words) or "gpu")


def log_device(r: Path) -> str | None:
    """The GPU a session's logs name in their "# device: NAME, DRIVER; ..." first line (warm.log first), or None."""
    logs = sorted(r.rglob("*.log"), key=lambda p: (p.name != "warm.log", str(p)))
    for p in logs:
        with p.open(errors="replace") as fh:
            m = re.match(r"^# device: ([^,;]+)", fh.readline())
        if m and m[1].strip():
            return m[1].strip()
    return None


def target_name(rel: Path, sha: str, gpu: str = "h200") -> str | None:
    """The evidence file name for a log at rel (relative to R_DIR), or None for files that stay behind; gpu is the
    device's gpu_tag."""
    parts = rel.parts
    suffix = "".join(suffix_of(p) for p in parts[:-1] if p.startswith("BW24_"))
    name = parts[-1]
    stem, ext = name.rsplit(".", 1) if "." in name else (name, "")
    if any(not p.startswith("BW24_") for p in parts[:-1]):  # inside a stage's own folder
        if name == "spec_bench.jsonl" and parts[-2].startswith("spec_"):  # spec_pair/spec_bench.jsonl
            return f"spec_bench_{gpu}_{sha}_{parts[-2][5:]}{suffix}.jsonl"
        if parts[-2] == "profile" and ext == "json":  # the per-kernel rows perf.breakdown tables
            return f"profile_{sha}{suffix}/{name}"
        if parts[-2] == "loads":  # the loads stage's per-config log and summary (its best_* files stay behind)
            return {"qmv8_loads.log": f"qmv8_loads_{gpu}_{sha}{suffix}.log",
                    "summary.txt": f"qmv8_loads_summary_{gpu}_{sha}{suffix}.txt"}.get(name)
        if parts[-3:-1] == ("loads", "table"):
            return f"tuning_{gpu}_{sha}{suffix}_loads_candidate_{name}"  # the candidate table the ab stage ran
        if parts[-3:-2] == ("tables",) and ext == "json":  # the variant stage's table, as the ab stage ran it
            return f"tuning_{gpu}_{sha}{suffix}_variant_{parts[-2]}.json"
        if parts[-2] == "stream_probe" and name == "stream_probe.json":  # the streamprobe stage's rows
            return f"stream_probe_{gpu}_{sha}{suffix}.json"
        if parts[-2] == "dequant" and name == "dequant.json":  # the dequant stage's rows
            return f"dequant_{gpu}_{sha}{suffix}.json"
        if parts[-2] == "probe" and name == "ceilings.json":  # the probe stage's record (bw24-probe --json)
            return f"ceilings_{gpu}_{sha}{suffix}.json"
        if parts[-2] == "nb":  # a workbench notebook's log and the tuning table it wrote
            return f"wb_{stem}_{gpu}_{sha}{suffix}.log" if ext == "log" else \
                f"tuning_{gpu}_{sha}{suffix}_{name}" if ext == "json" else None
        return None  # mvsweep/*.json, vsweep/*: the logs above carry their tables
    if name in ("kernel_check.log", "pytest_gpu.log", "stages.log", "mvsweep.log", "vsweep.log", "moe_decode.log",
                "overlap.log", "attn_sweep.log", "knockout.log", "loop_gap.log", "mvbench.log", "stream_probe.log",
                "probe.log", "dequant.log"):
        return {"stages": "stage_latency", "vsweep": "verify_sweep", "mvsweep": "matvec_sweep"}.get(stem, stem) \
            + f"_{gpu}_{sha}{suffix}.log"
    if name == "mvbench.json":  # the mvbench stage's pytest-benchmark JSON (each case's GB/s in its extra_info)
        return f"mvbench_{gpu}_{sha}{suffix}.json"
    if name == "profile.log":
        return f"profile_{gpu}_{sha}{suffix}.txt"
    if stem.startswith("pytest_gpu_k_") and ext == "log":  # the pytest stage on a selection (pytest EXPR)
        return f"pytest_gpu_{gpu}_{sha}{suffix}_k_{stem.removeprefix('pytest_gpu_k_')}.log"
    if stem.startswith("run_gen_"):
        return f"{stem}_cuda_{gpu}_{sha}{suffix}.log"
    if stem.startswith("tables_") and ext == "log":  # the variant stage's printout (the entries before / after)
        return f"tuning_{gpu}_{sha}{suffix}_variant_{stem[7:]}.log"
    if name in ("perf_ab.log", "perf_ab.jsonl"):  # the ab stage: bw24 alone, its rows evidence only
        return f"perf_ab_{gpu}_{sha}{suffix}.{ext}"
    if stem.startswith("perf_") and ext == "log":
        return f"perf_{gpu}_{sha}{suffix or ''}.log"  # several perf stages of one folder are concatenated
    if stem.startswith("spec_") and ext == "log":
        return f"spec_bench_{gpu}_{sha}_{stem[5:]}{suffix}.txt"
    if stem.startswith("ranks_") and ext in ("log", "json"):  # the ranks stage: its log and the FR-Spec ranks file
        return f"frspec_{stem}_{gpu}_{sha}{suffix}.{ext}"
    if stem.startswith("bg_") and ext == "out" and not suffix:  # a chain's own log (bg NAME: its stamps, tails)
        return f"{stem}_{gpu}_{sha}.txt"
    if stem.startswith("ncu_") and ext == "txt":  # the ncu stage's ncu_<model>_<regex>_T1.txt
        return f"ncu_{gpu}_{sha}{suffix}_{stem[4:]}.txt"
    return None


_GIT = re.compile(r"^# device:.*\bgit: ([0-9a-f]{7,40})")


def foreign(p: Path, sha: str) -> str | None:
    """The commit a log's "# device: ...; git: X" first line names when it is not `sha` (either a prefix of the
    other), else None. Why: the host's /tmp can outlive a session, and at e223fb5 its /tmp/r still held f020fd1's
    kernel-check, pytest, gates and perf logs, which this script would have filed under the new commit."""
    if p.suffix not in (".log", ".txt"):
        return None
    with p.open(errors="replace") as fh:
        m = _GIT.match(fh.readline())
    if m is None or m[1].startswith(sha) or sha.startswith(m[1]):
        return None
    return m[1]


def foreign_folder(r: Path, p: Path, sha: str) -> str | None:
    """For a file inside a stage's own folder (probe/ceilings.json), the commit its stage's log (probe.log) names
    when that is not `sha`: such files carry no header of their own. At 7f1070b an H100's /tmp/r still held
    a7e5b1d's probe/ceilings.json beside its probe.log, and the ceilings were filed under the new commit."""
    parts = p.relative_to(r).parts
    log = r / f"{parts[0]}.log"
    return foreign(log, sha) if len(parts) > 1 and log.is_file() else None


def plan(r: Path, sha: str, skipped: list[str] | None = None, gpu: str = "h200") -> dict[str, list[Path]]:
    """Evidence name -> the logs (in name order) that make it; a log another commit's session wrote (foreign) is
    left out, and named in `skipped` where given."""
    out: dict[str, list[Path]] = {}
    for p in sorted(r.rglob("*")):
        if p.is_file():
            t = target_name(p.relative_to(r), sha, gpu)
            if t is None:
                continue
            other = foreign(p, sha) or foreign_folder(r, p, sha)
            if other is not None:
                if skipped is not None:
                    skipped.append(f"{p.relative_to(r)} (git {other})")
                continue
            out.setdefault(t, []).append(p)
    return out


def new_perf_rows(r: Path) -> list[str]:
    """The host's perf.jsonl lines after the committed prefix (ValueError where they differ)."""
    host = (r / "perf.jsonl").read_text().splitlines() if (r / "perf.jsonl").is_file() else []
    ours = PERF.read_text().splitlines() if PERF.is_file() else []
    if not host:
        return []
    for i, (a, b) in enumerate(zip(ours, host, strict=False)):
        if a != b:
            raise ValueError(f"{r / 'perf.jsonl'} line {i + 1} differs from {PERF}: not a copy of it plus new rows")
    if len(host) < len(ours):
        raise ValueError(f"{r / 'perf.jsonl'} has {len(host)} lines, fewer than the committed {len(ours)}")
    return host[len(ours):]


def merged_manifest(r: Path, committed: Path | None = None) -> list[str] | None:
    """The committed manifest's lines (MANIFEST when not given, looked up at the call: a default bound at definition
    read the repository's file under the test's stand-in) with the session's (R_DIR/kernel_manifest.jsonl) added,
    each module once (by its parsed JSON), sorted; None when the session recorded none."""
    committed = MANIFEST if committed is None else committed
    host = r / "kernel_manifest.jsonl"
    if not host.is_file():
        return None
    lines = (committed.read_text().splitlines() if committed.is_file() else []) + host.read_text().splitlines()
    return sorted({json.dumps(json.loads(ln), sort_keys=True) for ln in lines if ln.strip()})


def text_of(paths: list[Path], header: str) -> str:
    parts = []
    for p in paths:
        t = p.read_text(errors="replace")
        lines = [ln for ln in t.splitlines() if not _WARN.search(ln)] if p.name == "profile.log" else t.splitlines()
        if not lines or not lines[0].startswith("# device:"):
            lines.insert(0, header)
        parts.append("\n".join(lines))
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("r", type=Path)
    ap.add_argument("sha")
    ap.add_argument("--device", default=None, help="the GPU (default: the one the logs' first lines name)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{7,40}", a.sha):
        print(f"ingest: {a.sha!r} is not a git sha", file=sys.stderr)
        return 2
    try:
        rows = new_perf_rows(a.r)
    except ValueError as e:
        print(f"ingest: {e}", file=sys.stderr)
        return 1
    device = a.device or log_device(a.r)
    skipped: list[str] = []
    gpu = gpu_tag(device) if device else "h200"
    files = plan(a.r, a.sha, skipped, gpu)
    if device is None and files:  # (perf rows and a kernel manifest name no GPU in a file name)
        print(f"ingest: no log in {a.r} names its GPU (# device: ...): pass --device", file=sys.stderr)
        return 2
    header = f"# device: {device}; git: {a.sha} (header added by ingest_evidence.py)"
    if files:
        print(f"device: {device} (file names: {gpu})")
    for s in skipped:
        print(f"ingest: left out {s}: another commit's session (a stale /tmp/r on the host)")
    for name, paths in files.items():
        print(f"{name:<70} <- {', '.join(str(p.relative_to(a.r)) for p in paths)}")
        if not a.dry_run:
            dest = EVIDENCE / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(paths[0].read_text() if name.endswith(".json") else text_of(paths, header))
    manifest = merged_manifest(a.r)
    if manifest is not None:
        print(f"kernel manifest: {len(manifest)} modules -> {MANIFEST.name}")
        if not a.dry_run:
            MANIFEST.write_text("\n".join(manifest) + "\n")
    print(f"perf rows: {len(rows)} new")
    if rows and not a.dry_run:
        with PERF.open("a") as fh:
            fh.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
