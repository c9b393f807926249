"""Issue-8 speculative-decoding speed cells, all in one run (GPU host; the CPU works, slowly, --quick).

python packages/bw24-engine/benchmarks/spec_bench.py OUTDIR --backend cuda [--smollm PATH]
    [--pair DRAFT.gguf TARGET.gguf] [--synth-dir /tmp/bw24-spec-synth] [--cells exact,ngram,self,mtp,pair]
    [--reps 5] [-n 128] [--verify batched|auto|rowwise] [--vs-llama-spec LLAMA_BIN_DIR] [--quick]
    [--frspec RANKS (pair) | --mtp-frspec RANKS (mtp)] [--frspec-n N]

Cells (plain and spec runs interleaved A B A B, medians; every spec run is checked token-identical to
the plain run of the same rep: "self-consistency PASS/FAIL"):
  exact  batched verify rows bit-identical to decode steps (T = 2, 4, 8, 16)? YES is what lets
         CudaOps.batch_rows_exact be True (the default since the H200 check; BW24_BATCH_ROWS_EXACT=0 turns it off).
  ngram  smollm2-135m, code-editing chat prompts (rewrite a given function), n-gram drafting: target >= 1.5x;
         each prompt twice: 128 tokens forced past the end of turn, and ending at the end of turn (-eos).
  self   draft = target on synthetic qwen3-8b (cached in --synth-dir), K=4: acceptance must be 1.0;
         overhead per accepted token = (decode time - draft steps x plain step - rounds x verify) /
         tokens / plain step (target < 10%).
  mtp    the same synthetic qwen3-8b with its NextN head (--mtp), K=3: one draft+verify round vs a
         plain step (target <= 1.25x). --mtp-frspec: the head's vocabulary matmul trimmed (FR-Spec).
  pair   qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b (--pair paths) on code prompts: >= 1.6x.
         --frspec: the draft's head trimmed (FR-Spec; rows named -frspecN).
--vs-llama-spec DIR: llama.cpp's llama-lookup (ngram cell) and llama-speculative (pair cell) from DIR on
the same GGUF and prompt text, one run per rep interleaved with ours. Rows go to OUTDIR/spec_bench.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
FUNC = ("def squares(xs):\n    \"\"\"Return the squares of xs.\"\"\"\n    out = []\n    for x in xs:\n"
        "        out.append(x * x)\n    return out\n")
CODE_PROMPT = ("Rewrite this Python function to use a list comprehension, keeping its name and docstring, "
               "and return the whole function:\n\n" + FUNC)
HINTS_PROMPT = ("Add type hints to this function and return the whole function:\n\ndef merge(a, b):\n"
                "    out = dict(a)\n    for k, v in b.items():\n        out[k] = v\n    return out\n")
RENAME_PROMPT = ("Rename the variable `out` to `result` in this function and return the whole function:\n\n" + FUNC)
# The ngram cell's code-editing prompts (each rewrites a given function); every one is reported, and
# the cell's verdict is their median.
EDIT_PROMPTS = (CODE_PROMPT, HINTS_PROMPT, RENAME_PROMPT)
PAIR_PROMPTS = (
    CODE_PROMPT,
    HINTS_PROMPT,
    "Write a Python function is_prime(n) with a docstring and a loop up to the square root of n.",
)


def git_sha() -> str:
    import os

    if os.environ.get("BW24_GIT"):  # the GPU host's copied .git is stale: the driver names the commit
        return os.environ["BW24_GIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "uncommitted"
    except OSError:
        return "?"


def device(eng) -> str:
    try:
        from bw24.runtime import describe

        return describe() if eng.backend == "cuda" else "cpu"
    except Exception:  # noqa: BLE001 - a label only
        return eng.backend


def synth_model(out: Path, preset: str, mtp: int = 0) -> Path:
    from bw24.gguf.synth import synth

    out.mkdir(parents=True, exist_ok=True)
    p = out / f"{preset}{'-mtp' if mtp else ''}.gguf"
    if not p.exists():
        tmp = p.with_suffix(".part")
        synth(preset, tmp, mix="q4_k_m", seed=0, mtp=mtp, progress=True)
        tmp.rename(p)  # a killed run never leaves a half-written cache entry
    return p


def chat_text(eng, msgs) -> str:
    """The prompt text Engine.chat_ids tokenizes (for llama.cpp's -p)."""
    if eng.tokenizer.chat_template:
        return eng.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    from bw24.engine.chat_fallback import fallback_template

    return fallback_template(eng.config.arch, eng.tokenizer).render(msgs, add_generation_prompt=True)


def divergence(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


WARM_STEPS = 24


def measure(eng, dec, ids, n, reps, other=None, stop=()):
    """Interleaved plain / spec (/ other) reps after one untimed warm-up of each (compile, capture);
    both end after a token in `stop` (the model's end of turn) or at n tokens.
    Returns (plain tok/s, spec tok/s, other results, stats of the last spec run, consistency text)."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import plain_decode

    plain, spec, oth, bad = [], [], [], None
    for r in range(reps + 1):
        # Untimed decode steps first, so both timed runs start on a busy GPU (the llama.cpp arm runs a
        # process in between). At ddfc1fd a 27-token plain run ran at ~585 tok/s against ~770 over 128
        # tokens: plain_decode captured its graph again inside every timed run (fixed since), and the
        # GPU may also have clocked down during the other process.
        plain_decode(eng.model, ids, WARM_STEPS, SamplingParams())
        toks, s = plain_decode(eng.model, ids, n, SamplingParams(), stop)
        plain_decode(eng.model, ids, WARM_STEPS, SamplingParams())
        got = list(dec.generate(ids, n, stop_ids=stop))
        if r > 0:
            plain.append(len(toks) / s)
            spec.append(dec.stats.decode_tok_s)
            if other is not None:
                try:  # a failing comparison arm is reported, never ends the (one-call) bench
                    oth.append(other())
                except (OSError, ValueError, subprocess.SubprocessError) as e:
                    oth.append(e)
        i = divergence(got, toks)
        if i is not None and bad is None:
            bad = f"FAIL (FIRST DIVERGENCE at index {i}, rep {r})"
    return statistics.median(plain), statistics.median(spec), oth, dec.stats, bad or "PASS"


def report(rows, summary, cell, eng, p, s, st, ok, extra="", *, dec, **kw):
    kw["fast_path"] = dec._fast is not None  # False: the host loop ran (sampled, penalties, rowwise verify)
    summary.append(f"{cell}: plain {p:.1f} tok/s, spec {s:.1f} tok/s = {s / p:.2f}x, acceptance "
                   f"{st.acceptance:.3f}, {st.tokens_per_round:.2f} tok/round, self-consistency: {ok}{extra}"
                   f"{'' if kw['fast_path'] else '  [host path: the GPU fast path did not run]'}")
    if "_line" in kw:  # the llama.cpp arm's line under the cell's
        summary.append(kw.pop("_line"))
    rows.append(dict(cell=cell, tok_s=s, plain_tok_s=p, ratio=s / p, acceptance=st.acceptance,
                     tokens_per_round=st.tokens_per_round, self_consistency=ok, device=device(eng), **kw))


def llama_arm(runs, ours) -> dict:
    if not runs:
        return {}
    errs = [r for r in runs if isinstance(r, Exception)]
    if errs:
        return dict(llama_error=str(errs[-1])[:500],
                    _line=f"   llama.cpp arm FAILED ({len(errs)}/{len(runs)} runs): {errs[-1]}")
    tok_s = statistics.median(r.tok_s for r in runs)
    acc = runs[-1].acceptance
    line = (f"   llama.cpp: {tok_s:.1f} tok/s (acceptance {acc if acc is None else f'{acc:.3f}'}); "
            f"bw24 spec / llama.cpp spec = {ours / tok_s:.2f}x")
    return dict(llama_spec_tok_s=tok_s, llama_acceptance=acc, vs_llama=ours / tok_s, _line=line)


def cell_exact(engines, rows, summary) -> None:
    from bw24.engine.spec import Verifier

    for eng in engines:
        ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
        same_all = True
        for k in (1, 3, 7, 15):
            block = [int(x) for x in np.random.default_rng(k).integers(0, eng.config.n_vocab, k + 1)]
            ref = eng.decode_logits(ids + block)[len(ids) - 1:]
            m = eng.model
            m.kv.reset()
            for t in ids:  # the same prefix path as decode_logits
                m.feed([t])
            got = Verifier(m, "batched").forward(block).logits
            same = bool(np.array_equal(got, ref[1:]))
            same_all &= same
            summary.append(f"exact  {eng.gguf.path.name} T={k + 1:2d}: batched verify rows bit-identical to decode: "
                           f"{'YES' if same else 'NO'} (max |diff| {float(np.max(np.abs(got - ref[1:]))):.3g})")
        rows.append(dict(cell=f"spec-exact-{eng.gguf.path.stem}", batch_rows_exact=same_all, device=device(eng)))
        claim = bool(getattr(eng.ops, "batch_rows_exact", False))
        summary.append(f"exact  {eng.gguf.path.name}: measured {'YES' if same_all else 'NO'}; the backend declares "
                       f"batch_rows_exact={claim}{'  <- flip it (or BW24_BATCH_ROWS_EXACT=1)' if same_all and not claim else ''}")


def cell_ngram(args, rows, summary) -> None:
    from bw24.engine import Engine
    from bw24.engine.perf.llama_spec import lookup_cmd, run_llama_spec
    from bw24.engine.spec import NgramDrafter, SpecDecoder

    eng = Engine.load(args.smollm, backend=args.backend, progress=False)
    tk = eng.tokenizer
    end = tuple(sorted(set(tk.eot_ids) | ({tk.eos_id} if tk.eos_id is not None else set())))
    ratios: dict[str, list[float]] = {}
    for i, prompt in enumerate(EDIT_PROMPTS):
        msgs = [{"role": "user", "content": prompt}]
        ids = eng.chat_ids(msgs)
        # "n128": 128 tokens forced past the end of turn (the rows before stop 12); "eos": the answer a
        # user gets, ending at the model's end of turn, as llama-lookup ends (it stops at EOG).
        for k, adaptive, stop in ((4, False, ()), (8, True, ()), (4, False, end), (8, True, end)):
            dec = SpecDecoder(eng.model, NgramDrafter(), k=k, adaptive=adaptive, verify=args.verify)
            other = None
            if args.vs_llama_spec and stop:
                text = chat_text(eng, msgs)
                cmd = lookup_cmd(Path(args.vs_llama_spec), eng.gguf.path, text, args.n, k)
                other = lambda cmd=cmd: run_llama_spec(cmd)  # noqa: E731
            p, s, oth, st, ok = measure(eng, dec, ids, args.n, args.reps, other, stop)
            tag = f"k{k}{'a' if adaptive else ''}{'-eos' if stop else ''}"
            ratios.setdefault(tag, []).append(s / p)
            extra = f" [target >= 1.5x; {st.n_generated} tokens]"
            kw = {}
            if k == 4 and not stop and dec._fast is not None:  # where a round's time goes
                ver = verify_alone(eng, dec, ids, k + 1, args.reps)
                extra += f"; verify T=5 alone {ver * 1e3:.3f} ms = {ver * p:.2f} plain steps"
                kw["verify_s"] = ver
            report(rows, summary, f"spec-ngram-{eng.gguf.path.stem}-p{i}-{tag}", eng, p, s, st, ok,
                   extra, dec=dec, n_tokens=st.n_generated, **kw, **llama_arm(oth, s))
    for tag, r in ratios.items():
        summary.append(f"ngram {tag}: median speedup over {len(r)} code-editing prompts {statistics.median(r):.2f}x "
                       f"(per prompt {', '.join(f'{x:.2f}' for x in r)}; target >= 1.5x)")


def verify_alone(eng, dec, ids, T, reps) -> float:
    """Median seconds of one fast verify of T rows (graph already captured by the runs before)."""
    m, fv = eng.model, dec.fast
    m.kv.reset()
    m.feed(ids)
    n0, ts = m.kv.n_past, []
    m.ops.copy_from_host(m.buf.view(T).ids, np.asarray(ids[-1:] * T, np.int32))
    for _ in range(reps + 2):
        m.kv.reset(n0)
        t = time.perf_counter()
        fv.run(T)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[2:])


def cell_self(args, eng, path, rows, summary) -> None:
    from bw24.engine.spec import DraftModelDrafter, SpecDecoder
    from bw24.engine.spec.draft_model import twin_model

    ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
    k = 4
    d = DraftModelDrafter(twin_model(eng.model))
    dec = SpecDecoder(eng.model, d, k=k, verify=args.verify)
    p, s, _, st, ok = measure(eng, dec, ids, args.n, args.reps)
    steps0 = d.steps
    list(dec.generate(ids, args.n))
    st, steps = dec.stats, d.steps - steps0
    ver = verify_alone(eng, dec, ids, k + 1, args.reps) if dec._fast is not None else float("nan")
    step = 1.0 / p
    over = (st.decode_s - steps * step - st.rounds * ver) / st.n_generated / step
    extra = (f"; {steps / st.rounds:.2f} draft steps + verify {ver * 1e3:.2f} ms per round (plain step "
             f"{step * 1e3:.2f} ms); overhead per accepted token {100 * over:.1f}% of a plain step (target < 10%, "
             f"acceptance must be 1.0)")
    report(rows, summary, f"spec-self-{path.stem}-k{k}", eng, p, s, st, ok, extra, dec=dec, overhead=over, verify_s=ver)


def frspec_ids(ranks: str | None, n_vocab: int, n: int | None) -> tuple[np.ndarray | None, str]:
    """FR-Spec: the ranks file's first n ids (a head trimmed to them) and the cell-name tag; (None, "") without one."""
    if not ranks:
        return None, ""
    from bw24.engine.spec.frspec import load_ranks

    ids = load_ranks(ranks, n_vocab, n)
    return ids, f"-frspec{ids.size}"


def cell_mtp(args, eng, path, rows, summary) -> None:
    from bw24.engine.spec import MTPDrafter, SpecDecoder

    ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
    keep, tag = frspec_ids(args.mtp_frspec, eng.config.n_vocab, args.frspec_n)  # the MTP head's trim
    dec = SpecDecoder(eng.model, MTPDrafter(eng.model, eng.gguf, frspec_ids=keep), k=3, verify=args.verify)
    p, s, _, st, ok = measure(eng, dec, ids, args.n, args.reps)
    rnd = st.decode_s / max(st.rounds, 1)
    ratio = rnd * p
    report(rows, summary, f"spec-mtp-{path.stem}{tag}-k3", eng, p, s, st, ok,
           f"; round {rnd * 1e3:.2f} ms = {ratio:.2f}x a plain step (target <= 1.25x)", dec=dec, round_over_step=ratio)


def pair_costs(dec, dr, ids, n, steps0, lines) -> dict:
    """Where a draft-model round's time goes: the draft's own plain decode speed (a draft step's cost),
    the draft steps of all the cell's spec runs, and how often captured graphs were rebuilt (a rebuild
    re-captures: milliseconds each)."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import plain_decode

    # untimed first: the draft model's first plain_decode captures its kept step (eager step, capture) inside
    # the timing; at e6bec2b the first prompt's draft read 857 tok/s against 1,485-1,500 on the next two
    plain_decode(dr.model, ids, WARM_STEPS, SamplingParams())
    toks, secs = plain_decode(dr.model, ids, n, SamplingParams())
    d = dec.drafter
    fast = dec._fast
    rounds = max(1, dec.stats.rounds)
    out = dict(draft_plain_tok_s=len(toks) / secs, draft_steps_all_runs=d.steps - steps0,
               verify_graph_rebuilds=getattr(getattr(fast, "graphs", None), "rebuilds", None),
               draft_graph_rebuilds=d._dev[1].rebuilds if d._dev else None)
    lines.append(f"   draft plain decode {out['draft_plain_tok_s']:.1f} tok/s; {rounds} rounds in the last run, "
                   f"{out['draft_steps_all_runs']} draft steps in all; "
                   f"graph rebuilds: verify {out['verify_graph_rebuilds']}, draft {out['draft_graph_rebuilds']}")
    return out


def cell_pair(args, rows, summary) -> None:
    from bw24.engine import Engine
    from bw24.engine.perf.llama_spec import run_llama_spec, speculative_cmd
    from bw24.engine.spec import DraftModelDrafter, SpecDecoder, check_same_vocab

    dpath, tpath = (Path(x) for x in args.pair)
    eng = Engine.load(tpath, backend=args.backend, progress=False)
    dr = Engine.load(dpath, backend=args.backend, n_ctx=eng.n_ctx, progress=False, draft=True)
    check_same_vocab(eng.gguf, eng.config, dr.gguf, dr.config)
    ids, tag = frspec_ids(args.frspec, dr.config.n_vocab, args.frspec_n)  # the draft's head trim
    dec = SpecDecoder(eng.model, DraftModelDrafter(dr.model, frspec_ids=ids, gguf=dr.gguf), k=5, adaptive=True,
                      verify=args.verify)
    ratios, after = [], []
    for i, prompt in enumerate(PAIR_PROMPTS):
        msgs = [{"role": "user", "content": prompt}]
        ids = eng.chat_ids(msgs)
        other = None
        if args.vs_llama_spec:
            cmd = speculative_cmd(Path(args.vs_llama_spec), tpath, dpath, chat_text(eng, msgs),
                                  args.n, 5)
            other = lambda cmd=cmd: run_llama_spec(cmd)  # noqa: E731
        steps0 = dec.drafter.steps
        p, s, oth, st, ok = measure(eng, dec, ids, args.n, args.reps, other)
        ratios.append(s / p)
        report(rows, summary, f"spec-pair-{dpath.stem}-{tpath.stem}{tag}-p{i}", eng, p, s, st, ok,
               " [target >= 1.6x]", dec=dec, **llama_arm(oth, s), **pair_costs(dec, dr, ids, args.n, steps0, after))
        summary.extend(after)
        after.clear()
    summary.append(f"pair: median ratio over {len(ratios)} code prompts {statistics.median(ratios):.2f}x (target >= 1.6x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--cells", default="exact,ngram,self,mtp,pair")
    ap.add_argument("--smollm", default="smollm2-135m", help="smollm2-135m GGUF (path or alias)")
    ap.add_argument("--pair", nargs=2, metavar=("DRAFT", "TARGET"), help="qwen2.5-coder-0.5b and -1.5b GGUF paths")
    ap.add_argument("--frspec", metavar="RANKS.json", help="pair cell: the draft's head trimmed to these ids (FR-Spec)")
    ap.add_argument("--mtp-frspec", metavar="RANKS.json", help="mtp cell: the MTP head trimmed to these ids (FR-Spec)")
    ap.add_argument("--frspec-n", type=int, default=None, help="the first N ids of --frspec / --mtp-frspec")
    ap.add_argument("--synth-dir", default="/tmp/bw24-spec-synth", help="cache of the synthetic qwen3-8b")
    ap.add_argument("--verify", default="batched", choices=("auto", "rowwise", "batched"),
                    help="batched (default) measures the fast path; self-consistency judges its exactness")
    ap.add_argument("--vs-llama-spec", metavar="DIR", help="llama.cpp bin dir with llama-speculative, llama-lookup")
    ap.add_argument("--quick", action="store_true", help="qwen3-0.6b shapes instead of qwen3-8b")
    ap.add_argument("--synth-preset", default=None, help="synthetic preset of the self/mtp cells (smoke tests)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    summary: list[str] = []
    cells = args.cells.split(",")
    t0 = time.perf_counter()
    if "exact" in cells:
        from bw24.engine import Engine

        cell_exact([Engine.load(args.smollm, backend=args.backend, progress=False)], rows, summary)
    if "ngram" in cells:
        cell_ngram(args, rows, summary)
    if "self" in cells or "mtp" in cells:
        from bw24.engine import Engine

        preset = args.synth_preset or ("qwen3-0.6b" if args.quick else "qwen3-8b")
        path = synth_model(Path(args.synth_dir), preset, mtp=1)
        summary.append(f"(synthetic {path.name} ready at {time.perf_counter() - t0:.0f} s)")
        eng = Engine.load(path, backend=args.backend, progress=False)
        if "self" in cells:
            cell_self(args, eng, path, rows, summary)
        if "mtp" in cells:
            cell_mtp(args, eng, path, rows, summary)
        del eng
    if "pair" in cells:
        if args.pair:
            cell_pair(args, rows, summary)
        else:
            summary.append("pair: skipped (give --pair DRAFT.gguf TARGET.gguf)")
    stamp, sha = time.strftime("%Y-%m-%dT%H:%M:%S%z"), git_sha()
    with open(out / "spec_bench.jsonl", "a") as fh:
        for r in rows:
            r = {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}  # NaN -> null
            fh.write(json.dumps({"time": stamp, "git": sha, **r}) + "\n")
    print("\n".join(summary))
    print(f"(spec_bench: {time.perf_counter() - t0:.0f} s)")
    return 1 if any(r.get("self_consistency", "PASS") != "PASS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
