"""`bw24-server --model SPEC [--host] [--port] [--backend] [--ctx] [--api-key] [--alias]
[--draft SPEC | --ngram | --mtp] [--k N] [--frspec RANKS.json [--frspec-n N]] [--verify MODE]`.

The drafter options are run-gen's (bw24.engine.spec.options); a request is served speculatively only
while it is the only active request (see worker.py)."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bw24-server", description="OpenAI-compatible /v1 server for bw24.")
    p.add_argument("--model", required=True, help="GGUF path, alias (e.g. smollm2-135m) or hf:repo/file")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--ctx", type=int, default=None, help="context length (default: the model's)")
    p.add_argument("--api-key", default=os.environ.get("BW24_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $BW24_API_KEY, else no auth)")
    p.add_argument("--alias", default=None, help="model name served in /v1/models")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    from bw24.engine.spec.options import add_drafter_args, add_k_arg
    add_drafter_args(p)
    add_k_arg(p)
    a = p.parse_args(argv)
    if a.ctx is not None and a.ctx < 2:
        p.error("--ctx must be at least 2")
    if not 1 <= a.k <= 8:
        p.error(f"--k {a.k}: must be in 1..8")
    if a.frspec_n is not None and a.frspec_n < 1:
        p.error(f"--frspec-n {a.frspec_n}: must be >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Fail fast on a model that cannot be found, before the port is bound.
    from bw24.gguf import resolve_model
    from bw24.gguf.errors import GGUFError
    try:
        resolve_model(a.model)
    except (GGUFError, OSError) as e:
        print(f"bw24-server: cannot resolve model {a.model!r}: {e}", file=sys.stderr)
        return 2
    # Drafter options checked from the GGUF headers (vocabulary, MTP head, ranks file), still unbound.
    from bw24.engine.spec.options import DrafterOptions, check_drafter_options
    drafter = DrafterOptions.from_args(a)
    try:
        check_drafter_options(drafter, a.model)
    except (ValueError, OSError) as e:  # GGUFError and the engine's BadInputError are ValueErrors
        print(f"bw24-server: bad drafter option: {e}", file=sys.stderr)
        return 2

    import uvicorn

    from .app import ServerConfig, create_app
    cfg = ServerConfig(model=a.model, backend=a.backend, n_ctx=a.ctx, api_key=a.api_key, alias=a.alias,
                       drafter=drafter if drafter.enabled else None, k=a.k)
    servers: list[uvicorn.Server] = []
    # A model that fails to load stops the server (the lifespan keeps the port while it loads).
    app = create_app(cfg, on_load_error=lambda _: setattr(servers[0], "should_exit", True))
    servers.append(uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port, log_level=a.log_level,
                                                 access_log=False)))
    servers[0].run()
    if app.state.worker.load_error:
        print(f"bw24-server: could not load {a.model!r}: {app.state.worker.load_error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
