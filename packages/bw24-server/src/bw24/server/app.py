"""FastAPI factory: the async HTTP side of bw24-server.

create_app() returns an app whose lifespan starts the engine worker thread; the model loads in
that thread, so /health answers 503 while it loads and 200 once it is ready.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from . import schemas as S
from .errors import APIError, bad_request, install_error_handlers, not_ready, unknown_model
from .metrics import Metrics
from .params import chat_params, chat_prompt_ids, completion_params
from .streaming import Reply, collect, stream
from .worker import Failed, Speculation, Started, Worker

ERRORS = {s: {"model": S.ErrorResponse} for s in (400, 401, 404, 503)}
# One SSE event (stream=true): `data:` holds a JSON chunk, or the final "[DONE]".
SSE_EVENT = {"type": "object", "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
             "required": ["data"]}
SSE_200 = {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}


@dataclass(frozen=True)
class ServerConfig:
    model: str                      # SPEC as given to resolve_model (path, alias or hf:)
    backend: str = "auto"
    n_ctx: int | None = None
    api_key: str | None = None
    alias: str | None = None
    drafter: Any = None             # bw24.engine.spec.options.DrafterOptions, or None: no speculation
    k: int = 4                      # initial draft length (adaptive) when drafter is set

    @property
    def served_name(self) -> str:
        if self.alias:
            return self.alias
        p = Path(self.model)
        return p.stem if p.suffix == ".gguf" else self.model


def default_loader(cfg: ServerConfig) -> Callable[[], Any]:
    def load() -> Any:
        from bw24.engine import Engine
        return Engine.load(cfg.model, backend=cfg.backend, n_ctx=cfg.n_ctx)
    return load


def create_app(cfg: ServerConfig, loader: Callable[[], Any] | None = None,
               on_load_error: Callable[[str], None] | None = None) -> FastAPI:
    """loader: builds the engine (default: Engine.load per cfg); on_load_error: called with the
    reason when loading fails (the CLI stops the server; otherwise /health keeps answering 503)."""
    metrics = Metrics()
    spec = Speculation(cfg.drafter, cfg.k) if cfg.drafter is not None and cfg.drafter.enabled else None
    worker = Worker(loader or default_loader(cfg), metrics, on_load_error, speculation=spec)
    names = {cfg.served_name, cfg.model}
    created = int(time.time())

    async def lifespan(_app: FastAPI):
        worker.start()
        yield
        worker.stop()

    app = FastAPI(title="bw24-server", version="0.1.0", lifespan=lifespan,
                  description="OpenAI-compatible API of the bw24 inference engine.")
    app.state.worker, app.state.metrics, app.state.config = worker, metrics, cfg
    install_error_handlers(app)
    app.add_middleware(_CountRequests, metrics=metrics)
    bearer = HTTPBearer(auto_error=False)

    async def auth(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if cfg.api_key is None:
            return
        if creds is None or creds.scheme.lower() != "bearer" or creds.credentials != cfg.api_key:
            raise APIError(401, "Missing or invalid API key: send 'Authorization: Bearer <key>'.",
                           code="invalid_api_key")

    def engine() -> Any:
        if not worker.ready:
            raise not_ready()
        return worker.engine

    def check_model(name: str | None) -> None:
        if name is not None and name not in names:
            raise unknown_model(name, [cfg.served_name])

    def fingerprint() -> str:
        return f"bw24-{getattr(worker.engine, 'backend', cfg.backend)}"

    @app.get("/health", response_model=S.Health, responses={503: {"model": S.ErrorResponse}})
    async def health() -> Any:
        if worker.load_error:
            raise APIError(503, f"Model load failed: {worker.load_error}", type="server_error",
                           code="model_load_failed")
        engine()
        return {"status": "ok", "model": cfg.served_name, "backend": fingerprint()[5:]}

    @app.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    async def prometheus() -> Response:
        metrics.queue_depth.set(worker.queue_depth())
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/v1/models", response_model=S.ModelList, dependencies=[Depends(auth)], responses=ERRORS)
    async def models() -> Any:
        return {"object": "list", "data": [{"id": cfg.served_name, "object": "model", "created": created,
                                            "owned_by": "bw24"}]}

    async def run(request: Request, req: S.SamplingFields, kind: str, build) -> Response:
        check_model(req.model)
        eng = engine()
        params = await run_in_threadpool(build, eng, req)
        reply = Reply(kind=kind, id=f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}",
                      model=req.model, created=int(time.time()), tokenizer=eng.tokenizer,
                      logprobs=params.logprobs, top_logprobs=params.top_logprobs,
                      include_usage=bool(req.stream_options and req.stream_options.include_usage),
                      fingerprint=fingerprint())
        job = worker.submit(params)
        try:
            if not req.stream:
                await _until_done_or_gone(request, job, collect(job, reply))
                return JSONResponse(reply.body())
            first = await _until_done_or_gone(request, job, job.events.get())
        except BaseException:
            job.cancel()
            raise
        if isinstance(first, Failed):
            raise first.error
        assert isinstance(first, Started)
        return StreamingResponse(stream(job, reply, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/chat/completions", response_model=S.ChatCompletion, dependencies=[Depends(auth)],
              responses={**ERRORS, **SSE_200})
    async def chat_completions(request: Request, req: S.ChatCompletionRequest) -> Any:
        return await run(request, req, "chat", chat_params)

    @app.post("/v1/completions", response_model=S.Completion, dependencies=[Depends(auth)],
              responses={**ERRORS, **SSE_200})
    async def completions(request: Request, req: S.CompletionRequest) -> Any:
        return await run(request, req, "completion", completion_params)

    @app.post("/tokenize", response_model=S.TokenizeResponse, dependencies=[Depends(auth)], responses=ERRORS)
    async def tokenize(req: S.TokenizeRequest) -> Any:
        check_model(req.model)
        eng = engine()
        if (req.content is None) == (req.messages is None):
            raise bad_request("Give exactly one of 'content' or 'messages'.", param="content")
        if req.content is not None:
            ids = await run_in_threadpool(eng.tokenizer.encode, req.content, req.add_special, False)
        else:
            ids = await run_in_threadpool(chat_prompt_ids, eng, req.messages)
        return {"tokens": ids, "count": len(ids), "max_model_len": eng.n_ctx}

    @app.post("/detokenize", response_model=S.DetokenizeResponse, dependencies=[Depends(auth)],
              responses=ERRORS)
    async def detokenize(req: S.DetokenizeRequest) -> Any:
        check_model(req.model)
        tok = engine().tokenizer
        bad = next((i for i in req.tokens if i >= tok.n_vocab), None)
        if bad is not None:
            raise bad_request(f"Token id {bad} in 'tokens' is outside the vocabulary (n_vocab={tok.n_vocab}).",
                              param="tokens")
        return {"prompt": await run_in_threadpool(tok.decode, req.tokens)}

    return app


class ClientGone(APIError):
    def __init__(self) -> None:
        super().__init__(499, "Client closed the request.", code="client_closed_request")


async def _until_done_or_gone(request: Request, job, awaitable):
    """Await `awaitable`; if the client disconnects first, cancel the job (frees the engine)."""
    task = asyncio.ensure_future(awaitable)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        job.cancel()
        raise ClientGone()
    finally:
        for t in (task, gone):
            if not t.done():
                t.cancel()


async def _disconnected(request: Request) -> None:
    # The body is already read, so the next ASGI message is the disconnect: no polling needed.
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _CountRequests:
    """Pure ASGI middleware (BaseHTTPMiddleware would interfere with streaming disconnects)."""

    KNOWN = {"/v1/models", "/v1/chat/completions", "/v1/completions", "/health", "/metrics",
             "/tokenize", "/detokenize", "/openapi.json"}

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            path = scope.get("path", "")
            endpoint = path if path in self.KNOWN else "other"
            self.metrics.requests.labels(endpoint=endpoint, status=str(status["code"])).inc()
