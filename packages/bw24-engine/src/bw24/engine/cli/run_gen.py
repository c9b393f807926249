"""`bw24 run-gen MODEL --prompt TEXT`: the prefill/decode gate line, then streamed text, then speed."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import BadInputError, EmptyPromptError, InvalidSamplingParamsError
from ..ops import BACKENDS
from ..sampling import SamplingParams
from ._common import run_guarded

PROG = "bw24 run-gen"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-gen", help="generate text, gated by a prefill-vs-decode logits check",
                       description=__doc__)
    p.add_argument("model", help="alias (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, ...), path or hf:...")
    p.add_argument("--prompt", required=True, help="prompt text (the user message with --chat)")
    p.add_argument("--chat", action="store_true", default=os.environ.get("BW24_GATE_CHAT") == "1",
                   help="wrap the prompt in the model's chat template (default: BW24_GATE_CHAT=1; the GPU host's "
                        "gates then prefill more than 16 tokens, the batched prefill path)")
    p.add_argument("--repeat", type=int, default=None,
                   help="the prompt text this many times, joined by newlines (default: BW24_GATE_REPEAT or 1): a gate "
                        "whose prompt reaches past BW24_ATTN_DEPTH's / BW24_ATTN_DEC_MMA's key counts")
    p.add_argument("-n", "--max-tokens", type=int, default=64, dest="max_tokens")
    p.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--n-ctx", type=int, default=None, help="context length (default: min(train, 4096))")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while loading")
    p.add_argument("--sensitivity", action="store_true", default=os.environ.get("BW24_GATE_SENSITIVITY") == "1",
                   help="also report what the backend's rounding alone (int8 activations, a float16 cache) does to "
                        "this model on the exact kernels, and the decode drift as a multiple of it "
                        "(default: BW24_GATE_SENSITIVITY=1)")
    # speculative decoding (spec/): the drafter options of run-spec, one K (adaptive from it)
    from ..spec.options import add_drafter_args, add_k_arg

    add_drafter_args(p)
    add_k_arg(p)
    p.set_defaults(func=lambda a: run_guarded(PROG, lambda: run(a)))


def run(args: argparse.Namespace) -> int:
    from ..engine import Engine

    # Validate everything cheap before loading a model.
    if not args.prompt.strip():
        raise EmptyPromptError("empty prompt: --prompt needs some text")
    if args.max_tokens <= 0:
        raise InvalidSamplingParamsError(f"-n/--max-tokens={args.max_tokens} (must be > 0)")
    if args.repeat is not None:
        repeat, said = args.repeat, f"--repeat={args.repeat}"
    else:
        env = os.environ.get("BW24_GATE_REPEAT", "1").strip()
        repeat, said = (int(env) if env.isdigit() else 0), f"BW24_GATE_REPEAT={env!r}"
    if repeat < 1:
        raise BadInputError(f"{said}: the prompt's copies, at least 1")
    prompt = "\n".join([args.prompt] * repeat)
    params = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                            repetition_penalty=args.repeat_penalty, seed=args.seed)

    eng = Engine.load(args.model, backend=args.backend, n_ctx=args.n_ctx, progress=not args.no_progress)
    print(f"model {eng.path.name} ({eng.config.arch}), backend {eng.backend}, n_ctx {eng.n_ctx}", file=sys.stderr)
    if args.chat:
        ids = eng.chat_ids([{"role": "user", "content": prompt}])
    else:
        ids = eng.tokenizer.encode(prompt, add_special=True)

    gate = eng.verify_prefill(ids, sensitivity=args.sensitivity)
    print(gate.line(), flush=True)
    if not gate.ok:
        print(f"{PROG}: prefill and decode logits disagree (tolerance {gate.tolerance:g}); no text generated",
              file=sys.stderr)
        return 1

    events = eng.generate(ids, args.max_tokens, params=params)
    if args.draft or args.ngram or args.mtp:  # speculative: same events, exact by construction (spec/)
        from ..spec.options import make_drafter, parse_k
        from ..spec.stream import speculative_generate

        drafter = make_drafter(args, eng, progress=not args.no_progress)
        events = speculative_generate(eng, drafter, ids, params, max_tokens=args.max_tokens,
                                      k=parse_k(str(args.k))[0], verify=args.verify)
    for ev in events:
        sys.stdout.write(ev.text)
        sys.stdout.flush()
    st = eng.last_stats
    print()
    print(f"generated {st.n_generated} tokens in {st.decode_s:.2f} s = {st.decode_tok_s:.1f} tok/s "
          f"(prefill {st.prefill_tok_s:.1f} tok/s)", flush=True)
    if "acceptance" in st.extra:
        print(f"speculative ({st.extra['drafter']}, verify {st.extra['verify']}): acceptance "
              f"{st.extra['accepted']}/{st.extra['drafted']}, {st.extra['tokens_per_round']:.2f} tokens/round", flush=True)
    report = getattr(eng.ops, "memory_report", None)  # cuda: VRAM used vs the plan and the gguf+KV+1GiB bound
    if report is not None:
        print(report(), flush=True)
    return 0
