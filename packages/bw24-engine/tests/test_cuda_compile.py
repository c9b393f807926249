"""CI (no GPU): every kernel file compiles through NVRTC for sm_90a (Hopper) and sm_120a (consumer
Blackwell) with every template instance the engine launches, and kernel_check's no-GPU path says
that the GPU stages did not run."""

from __future__ import annotations

import re

import pytest
from bw24.engine.kernel_check import main as kernel_check_main
from bw24.engine.ops.cuda.kernels import COMPILE_SET, KERNEL_DIR, kernel_files
from bw24.runtime import compile_cubin, has_gpu


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("kcache")
    mp.setenv("BW24_KERNEL_CACHE", str(d))  # a fresh cache: NVRTC really runs in this test
    yield d
    mp.undo()


def test_every_kernel_file_is_in_the_compile_set():
    assert {f.name for f in kernel_files()} == set(COMPILE_SET)


@pytest.mark.parametrize("arch", ["90a", "120a"])
@pytest.mark.parametrize("name", sorted(COMPILE_SET))
def test_kernel_file_compiles(cache, name, arch):
    ck = compile_cubin(KERNEL_DIR / name, arch, name_expressions=COMPILE_SET[name])
    assert ck.cubin[:4] == b"\x7fELF"
    assert set(ck.lowered) == set(COMPILE_SET[name])
    assert all(sym.startswith("_Z") for sym in ck.lowered.values())
    assert (cache / f"{ck.key}.cubin").is_file()


@pytest.mark.parametrize("name", sorted(COMPILE_SET))
def test_kernel_file_compiles_with_pdl(cache, name):
    """BW24_PDL (CudaOps.pdl) compiles griddepcontrol into every kernel: the cubin must differ from the
    plain one wherever the file has a kernel (so the define reaches the code)."""
    plain = compile_cubin(KERNEL_DIR / name, "90a", name_expressions=COMPILE_SET[name])
    pdl = compile_cubin(KERNEL_DIR / name, "90a", {"BW24_PDL": 1}, name_expressions=COMPILE_SET[name])
    assert pdl.cubin[:4] == b"\x7fELF" and set(pdl.lowered) == set(plain.lowered)
    assert pdl.cubin != plain.cubin


# The kernels whose PDL wait sits inside qmv8_rows / qmv_rows, after their first weight loads, (moe_router) after
# (moe_router, moe_router_norm) after router_prefetch's loads of its rows' weights, or (attn_dec_mma) after
# dm_early's tiles of older cache rows.
_PDL_LATE_WAIT = {"qmv8", "qmv8_3", "qmv8_3n", "qmv8_na", "qmv8_glu", "qmv8_qkvr", "qmv", "qmv3", "qmv3n", "moe_router", "moe_router_norm",
                  "attn_dec_mma"}


def _kernels(text: str):
    for m in re.finditer(r"__global__", text):
        body = text.index("{", m.start())
        head = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", text[m.start():body])
        yield re.search(r"(\w+)\s*\(", head).group(1), text[body + 1:body + 200].lstrip()


# The kernels whose trigger is a build choice (attn_dec_mma: BW24_DEC_MMA_LATE_TRIGGER moves it after its tiles; the
# trigger only schedules the launch behind, whose own wait covers this grid's writes): their opening line.
_PDL_TRIGGER_CHOICE = {"attn_dec_mma": "if (!BW24_DEC_MMA_LATE_TRIGGER) PDL_TRIGGER();"}


def _missing_pdl_wait(text: str) -> list[str]:
    return [n for n, body in _kernels(text)
            if not body.startswith(_PDL_TRIGGER_CHOICE.get(n, "PDL_TRIGGER();") if n in _PDL_LATE_WAIT
                                   else "PDL_OPEN();")]


def test_every_kernel_opens_with_the_pdl_wait():
    """Under PDL a kernel may start before the one ahead has finished: one that touched the previous
    kernel's data before griddepcontrol.wait would race. So every kernel opens with PDL_OPEN, or (the
    matvecs) PDL_TRIGGER with qmv8_rows / qmv_rows waiting before they read activations."""
    texts = {f.name: f.read_text() for f in kernel_files()}
    assert {f: _missing_pdl_wait(t) for f, t in texts.items() if _missing_pdl_wait(t)} == {}
    names = {n for t in texts.values() for n, _ in _kernels(t)}
    assert _PDL_LATE_WAIT <= names and len(names) > 20
    rows = texts["qmatvec_q8.cu"].split("qmv8_rows(")[1].split("reduce_store")[0]
    assert rows.count("PDL_WAIT();") == 3  # decode (after the first loads; or first, QMV8_EARLY=0) and verify
    rows = texts["qmatvec.cu"].split("void qmv_rows(")[1].split("reduce_store")[0]
    assert rows.count("PDL_WAIT();") == 1  # after the first loads, for any T
    # moe_router: nothing but its weights (constants no kernel writes) before the wait, x and the logits after
    body = texts["moe.cu"].split("void moe_router(")[1]
    before, after = body.split("PDL_WAIT();", 1)
    assert "router_prefetch(w," in before and not re.search(r"(?<![.\w])(x|rl|tickets|sel|wts)\b", before.split("{", 1)[1])
    assert "router_row(w, x," in after.split("route_token")[0]
    body = texts["moe.cu"].split("\nmoe_router_norm(")[1]
    before, after = body.split("PDL_WAIT();", 1)
    assert "router_prefetch(w," in before and not re.search(r"(?<![.\w])(h|nw|x|xq|xqs|rl|tickets|sel|wts)\b",
                                                            before.split("{", 1)[1])
    assert "rms_row<4, NV>(h " in after and "router_row(w, xsm," in after.split("route_token")[0]
    # attn_dec_mma: nothing but dm_early before the wait; dm_early reads pos (one thread) and the cache rows before it
    body = texts["attention_dec_mma.cu"].split("attn_dec_mma(const float")[1].split("{", 1)[1]
    before = re.sub(r"//[^\n]*", "", body.split("PDL_WAIT();", 1)[0])
    assert re.findall(r"\b(\w+)\s*[<(]", before) == ["if", "PDL_TRIGGER", "dm_early"]  # (the trigger: a build choice)
    early = re.sub(r"//[^\n]*", "", texts["attention_dec_mma.cu"].split("int dm_early(")[1].split("\n}\n")[0])
    assert "__ldcg(pos)" in early and not re.search(r"(?<![.\w])(q|out|part_ml|part_acc|xq|xs)\b", early)
    assert re.search(r"#else\s+if \(jt >= j1 \|\| min\(jt \+ DM_KT, j1\) > p0e\) break;", early)  # keys < p0e only


def test_pdl_lint_catches_a_kernel_without_the_wait():
    """Canary for the check above: a kernel that opens with anything else, or a decode matvec that
    waits at its top instead of in qmv8_rows, is named."""
    bad = 'extern "C" __global__ void f(float* x) {\n    x[0] = 1.f;\n}\n'
    bad += "__global__ void __launch_bounds__(W * 32)\nqmv8(int K) {\n    PDL_OPEN();\n}\n"
    assert _missing_pdl_wait(bad) == ["f", "qmv8"]


@pytest.mark.parametrize("f", kernel_files(), ids=lambda p: p.name)
def test_kernel_file_opens_with_its_formula_mapping_and_bytes(f):
    head = f.read_text().split("#include")[0]
    assert all(re.search(w, head, re.I) for w in ("formula", "thread-to-data", "bytes"))


def test_kernel_check_without_gpu_runs_compile_only(cache):
    if has_gpu():
        pytest.skip("a GPU is present: kernel_check runs its GPU stages (tests/test_cuda_gpu.py)")
    lines: list[str] = []
    rc = kernel_check_main(seed=5, out=lines.append)
    assert rc == 0
    assert lines[0].startswith("kernel_check") and "seed=5" in lines[0]
    assert sum(" OK" in s and s.startswith("compile ") for s in lines) == 2 * len(COMPILE_SET)
    assert "GPU stages did not run" in lines[-1]
    assert all("ALL GREEN" not in s for s in lines)  # green is only claimed after the GPU stages


def test_broken_kernel_fails_the_compile_stage(cache, tmp_path, monkeypatch):
    """Canary: a kernel file that does not compile turns the compile-only stage red."""
    import bw24.engine.ops.cuda.kernels as K

    (tmp_path / "broken.cu").write_text('extern "C" __global__ void f(float* x) { x[0] = nope; }\n')
    monkeypatch.setattr(K, "kernel_files", lambda: [tmp_path / "broken.cu"])
    monkeypatch.setattr(K, "KERNEL_DIR", tmp_path)
    from bw24.engine import kernel_check

    lines: list[str] = []
    assert kernel_check.compile_stage(out=lines.append) is False
    assert any("FAIL" in s for s in lines)


def test_stage_latency_benchmark_kernel_compiles(cache):
    """benchmarks/stage_latency.cu (gpu_stage_latency.py: graph of kernels vs a persistent kernel's grid
    barrier, empty and with a matvec's work) compiles for sm_90a with every kernel the script loads; its
    timing needs the GPU."""
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "stage_latency.cu"
    ck = compile_cubin(bench, "90a")
    assert ck.cubin[:4] == b"\x7fELF"
    for name in ("stage", "persistent", "persistent_ar", "stage_mv", "persistent_mv"):
        assert f"{name}\0".encode() in ck.cubin, name  # extern "C": the symbol is the plain name


def test_warm_kernels_builds_the_modules_get_kernel_loads(cache):
    """benchmarks/warm_kernels.py (the GPU host's first stage) compiles each COMPILE_SET instance as its own
    module with CudaOps' sm_90 defines, and each file's plain extern "C" kernels as one more, under the cache
    keys get_kernel's loads ask for (one name expression for a template instance, none otherwise)."""
    from bw24.runtime.compile import cache_key

    wk = _warm_module()
    jobs = wk.jobs(pdl=True)
    assert {(f, names) for f, names, _ in jobs} == (
        {(f, (n,)) for f, ns in COMPILE_SET.items() for n in ns} | {(f, ()) for f in COMPILE_SET})
    assert all(defines == {"BW24_PDL": 1} for _, _, defines in jobs)
    job = next(j for j in jobs if j[0] == "norm.cu" and j[1])
    key, _ = wk._compile(job, "90a")  # (found or not: the module-wide cache may hold it from an earlier test)
    assert key == cache_key(KERNEL_DIR / "norm.cu", "90a", {"BW24_PDL": 1}, job[1], ())
    assert (cache / f"{key}.cubin").is_file()


def test_warm_kernels_counts_the_modules_the_disk_cache_holds(tmp_path, monkeypatch):
    """The host's `warm` over the pack kcache_pack.sh builds here: a module whose cubin the disk cache holds
    (by the key that holds NVRTC's version) counts as found and is not compiled again; in a fresh cache it is
    compiled and not counted."""
    import bw24.runtime.compile as C

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "_mem", {})  # no module from an earlier test in memory: NVRTC runs
    wk = _warm_module()
    job = ("norm.cu", (), {"BW24_PDL": 1})
    key, hit = wk._compile(job, "90a")
    assert (tmp_path / f"{key}.cubin").is_file() and not hit
    monkeypatch.setattr(C, "_mem", {})
    monkeypatch.setattr(C, "_nvrtc_compile", lambda *a: pytest.fail("compiled a module the disk cache holds"))
    assert wk._compile(job, "90a") == (key, True)


def _warm_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "warm_kernels", Path(__file__).resolve().parents[1] / "benchmarks" / "warm_kernels.py")
    wk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wk)
    return wk


def test_warm_kernels_replays_the_recorded_modules(tmp_path, cache):
    """warm_kernels.manifest_jobs: the recorded modules of kernel files that exist, once each, with the PDL
    define as this device gets it; a recorded instance that no longer compiles comes back as None (counted,
    skipped), not as the warm stage's failure."""
    import json

    wk = _warm_module()
    rec = [{"file": "norm.cu", "names": [], "defines": [["BW24_PDL", 1], ["BW24_PLANTED_BUG", 1]]},
           {"file": "norm.cu", "names": [], "defines": [["BW24_PLANTED_BUG", 1], ["BW24_PDL", 1]]},  # the same
           {"file": "norm.cu", "names": [], "defines": [["BW24_PLANTED_BUG", 1]]},  # a device without PDL's
           {"file": "gone.cu", "names": [], "defines": [["BW24_PDL", 1]]},
           {"file": "norm.cu", "names": ["rmsnorm_reg<3,99>"], "defines": [["BW24_PDL", 1]]}]
    m = tmp_path / "m.jsonl"
    m.write_text("\n".join(json.dumps(r) for r in rec) + "\n")
    jobs = wk.manifest_jobs(m, pdl=True)
    assert jobs == [("norm.cu", (), {"BW24_PDL": 1, "BW24_PLANTED_BUG": 1}),
                    ("norm.cu", ("rmsnorm_reg<3,99>",), {"BW24_PDL": 1})]
    assert wk.manifest_jobs(m, pdl=False) == [("norm.cu", (), {"BW24_PLANTED_BUG": 1})]
    assert wk.manifest_jobs(tmp_path / "absent.jsonl") == []
    assert wk._compile(jobs[0], "90a")[0] is not None
    assert wk._compile(("norm.cu", ("no_such_kernel<1>",), {"BW24_PDL": 1}), "90a") == (None, False)


def test_get_kernel_records_each_module_it_loads(tmp_path, monkeypatch):
    """With BW24_KERNEL_MANIFEST set, get_kernel appends the module it loads (file, name expressions, sorted
    defines) as one JSON line; unset, nothing is written."""
    import json

    import bw24.runtime as rt
    from bw24.engine.ops.cuda import kernels as K

    class Mod:
        def get(self, name):
            return name

    monkeypatch.setattr(rt, "load_module", lambda *a, **kw: Mod())
    m = tmp_path / "m.jsonl"
    K.get_kernel("norm.cu", "rmsnorm_reg<4,2>", (("BW24_PDL", 1), ("A_TEST_RECORD", 0)))  # unset: nothing
    assert not m.exists()
    monkeypatch.setenv(K.MANIFEST_ENV, str(m))
    K.get_kernel("norm.cu", "rmsnorm_reg<4,2>", (("BW24_PDL", 1), ("A_TEST_RECORD", 1)))
    K.get_kernel("norm.cu", "rms_plain_test", (("A_TEST_RECORD", 1),))
    got = [json.loads(ln) for ln in m.read_text().splitlines()]
    assert got == [{"file": "norm.cu", "names": ["rmsnorm_reg<4,2>"], "defines": [["A_TEST_RECORD", 1], ["BW24_PDL", 1]]},
                   {"file": "norm.cu", "names": [], "defines": [["A_TEST_RECORD", 1]]}]


def _blocks_per_sm(report: str) -> dict[tuple[str, str], int]:
    """attn_registers.sh's report -> {(build, instance): blocks an SM}."""
    out, build = {}, ""
    for line in report.splitlines():
        if line.startswith("== "):
            build = line[3:].strip()
        elif "blocks/SM" in line:
            out[(build, line.split()[0])] = int(line.split()[-1])
    return out


def test_attention_instances_keep_their_blocks_per_sm():
    """benchmarks/attn_registers.sh (ptxas -v, sm_90a): the decode attention's 2-heads instance (the 0.6B's, and
    block heads 2's) fits 4 blocks an SM and the 4-heads one 3, as they were built when measured (5b56e32);
    min blocks 4 fits 4 for every instance. A source change that only moved where combine_head computes its
    dims took the 2-heads instance from 128 registers to 168 (3 an SM) before this test: the canary below is
    that report's line."""
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH (the CUDA toolkit's ptxas reports the registers)")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "attn_registers.sh"
    got = _blocks_per_sm(subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout)
    plain, bounded = "-DBW24_PDL=1 (the defaults)", "-DBW24_PDL=1 -DATTN_MIN_BLOCKS=4"
    assert got[(plain, "attn_split<128,128,2,32,__half>")] == 4
    assert got[(plain, "attn_split<128,128,4,32,__half>")] == 3
    assert {v for (b, name), v in got.items() if b == bounded and name.startswith("attn_split")} == {4}
    canary = _blocks_per_sm("== -DBW24_PDL=1 (the defaults)\n"
                            "attn_split<128,128,2,32,__half>        regs 168  spill_loads 0  blocks/SM 3\n")
    assert canary[(plain, "attn_split<128,128,2,32,__half>")] != 4
