"""The one thread that owns the engine (and the GPU).

HTTP handlers never touch the engine: they submit a Job and read its events from an asyncio
queue. Jobs run one at a time in arrival order (a FIFO queue is the fair order for a single
sequence engine). A cancelled job (client gone) is dropped between two tokens, which frees the
engine for the next job at once.

Prompt cache: each job asks the engine to keep the KV of the longest common token prefix with what
it holds from the previous job (multi-turn chat re-sends the whole conversation); the engine reports
how many prompt tokens it kept in last_stats.cached_tokens.

Speculative decoding (bw24-server --draft/--ngram/--mtp): a job is served by spec.stream's
speculative_generate only when no other job was active or queued when it arrived, none is queued when
it starts, and it asks for no logprobs (that path has none); otherwise by engine.generate. The choice
is made once per job, at its start. The speculative runner prefills the whole prompt from a fresh KV
(no prefix reuse; it also voids the engine's prefix record), so such a job reports cached_tokens=0.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import APIError, not_ready
from .metrics import Metrics

log = logging.getLogger("bw24.server")


@dataclass(frozen=True)
class GenParams:
    """One generation request, validated and tokenized by the HTTP side."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0


# ---- events a job delivers to the HTTP side ----------------------------------------------------

@dataclass(frozen=True)
class Speculation:
    """Drafter options of the server (bw24.engine.spec.options.DrafterOptions) and the adaptive K."""

    options: Any
    k: int = 4


@dataclass(frozen=True)
class Started:
    cached_tokens: int
    drafter: str | None = None   # the drafter's name when this job is served speculatively


@dataclass(frozen=True)
class Token:
    text: str            # UTF-8-safe delta; the engine holds back text that may start a stop string
    token_id: int
    logprob: float | None
    top_logprobs: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Finished:
    finish_reason: str   # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class Failed:
    error: APIError


@dataclass
class Job:
    params: GenParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)
    alone: bool = True   # no other job was active or queued when this one was submitted

    def cancel(self) -> None:
        self.cancelled.set()

    def _put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop is closed: the server is shutting down
            self.cancelled.set()


_STOP = object()


class Worker:
    def __init__(self, loader: Callable[[], Any], metrics: Metrics,
                 on_load_error: Callable[[str], None] | None = None, speculation: Speculation | None = None):
        self._loader, self._on_load_error = loader, on_load_error
        self.metrics = metrics
        self.speculation = speculation
        self.engine: Any = None
        self.drafter: Any = None
        self._active = 0     # jobs submitted and not yet done (queued or running)
        self._lock = threading.Lock()
        self.load_error: str | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="bw24-engine", daemon=True)

    @property
    def ready(self) -> bool:
        return self.engine is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._jobs.put(_STOP)
        self._thread.join(timeout)

    def queue_depth(self) -> int:
        return self._jobs.qsize()

    def submit(self, params: GenParams) -> Job:
        if not self.ready:
            raise not_ready()
        job = Job(params, asyncio.get_running_loop())
        with self._lock:
            job.alone = self._active == 0
            self._active += 1
        self._jobs.put(job)
        self.metrics.queue_depth.set(self._jobs.qsize())
        return job

    # ---- worker thread ----

    def _run(self) -> None:
        try:
            engine = self._loader()
            if self.speculation is not None:  # built once, in the thread that owns the engine
                from bw24.engine.spec.options import make_drafter
                self.drafter = make_drafter(self.speculation.options, engine)
        except Exception as e:  # reported by /health; the process keeps serving errors
            log.exception("model load failed")
            self.load_error = f"{type(e).__name__}: {e}"
            if self._on_load_error is not None:
                self._on_load_error(self.load_error)
            return
        self.engine = engine
        log.info("model ready")
        while True:
            job = self._jobs.get()
            self.metrics.queue_depth.set(self._jobs.qsize())
            if job is _STOP:
                return
            try:
                if job.cancelled.is_set():
                    self.metrics.cancelled.inc()
                    continue
                self._generate(job)
            except APIError as e:
                job._put(Failed(e))
            except ValueError as e:  # the engine's BadInputError family: the request, not the server
                job._put(Failed(APIError(400, str(e), code="invalid_request")))
            except Exception as e:
                log.exception("generation failed")
                job._put(Failed(APIError(500, f"Generation failed: {type(e).__name__}: {e}",
                                         type="server_error", code="generation_failed")))
            finally:
                with self._lock:
                    self._active -= 1

    def _speculate(self, job: Job) -> bool:
        """Serve this job speculatively? (see the module docstring); counts why not in the metrics."""
        if self.drafter is None:
            return False
        reason = None
        if job.params.logprobs or job.params.top_logprobs:
            reason = "logprobs"
        elif not job.alone or not self._jobs.empty():
            reason = "concurrent"
        if reason is not None:
            self.metrics.spec_skipped.labels(reason=reason).inc()
            return False
        return True

    def _generate(self, job: Job) -> None:
        p, m = job.params, self.metrics
        spec = self._speculate(job)
        if spec:
            from bw24.engine.spec.stream import speculative_generate
            kw = engine_kwargs(p)
            del kw["logprobs"], kw["top_logprobs"]
            max_tokens, stop = kw.pop("max_tokens"), kw.pop("stop")
            events = speculative_generate(self.engine, self.drafter, list(p.prompt_ids), sampling_params(**kw),
                                          max_tokens=max_tokens, stop=stop, k=self.speculation.k, adaptive=True,
                                          verify=self.speculation.options.verify)
            stats = self.engine.last_stats
            cached = 0  # the runner prefills the whole prompt from a fresh KV
            m.spec_requests.inc()
        else:
            events = self.engine.generate(list(p.prompt_ids), reuse_prefix=True, **engine_kwargs(p))
            cached = int(self.engine.last_stats.cached_tokens)
        job._put(Started(cached, self.drafter.name if spec else None))
        n_gen, finish, t_prev, t_first = 0, "length", None, None
        try:
            for ev in events:
                if job.cancelled.is_set():
                    m.cancelled.inc()
                    return
                now = time.perf_counter()
                if ev.token_id is not None and ev.token_id >= 0:
                    n_gen += 1
                    if t_prev is None:
                        t_first = now
                        m.ttft.observe(now - job.submitted)
                    else:
                        m.token_latency.observe(now - t_prev)
                    t_prev = now
                    job._put(Token(ev.text or "", ev.token_id, ev.logprob, _pairs(ev.top_logprobs)))
                if ev.finish_reason:
                    finish = "stop" if ev.finish_reason == "stop" else "length"
                    break
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # the engine's generator cleans up before the next job starts
            m.prompt_tokens.inc(len(p.prompt_ids))
            m.cached_tokens.inc(cached)
            m.generated_tokens.inc(n_gen)
            if spec:
                m.spec_drafted.inc(int(stats.extra.get("drafted", 0)))
                m.spec_accepted.inc(int(stats.extra.get("accepted", 0)))
            if t_first is not None and t_prev is not None and n_gen > 1:
                m.tokens_per_second.set((n_gen - 1) / max(t_prev - t_first, 1e-9))
        job._put(Finished(finish, len(p.prompt_ids), n_gen, cached))


def _pairs(top: Any) -> tuple[tuple[int, float], ...]:
    """The engine's top_logprobs (None, dict id->lp, or sequence of (id, lp)) as pairs, best first."""
    if not top:
        return ()
    items = top.items() if isinstance(top, dict) else top
    return tuple(sorted(((int(i), float(lp)) for i, lp in items), key=lambda t: -t[1]))


def sampling_params(**kw: Any) -> Any:
    """Engine.generate's sampling keywords as the SamplingParams speculative_generate takes."""
    from bw24.engine.sampling import SamplingParams
    return SamplingParams(**kw)


def engine_kwargs(p: GenParams) -> dict[str, Any]:
    """GenParams -> Engine.generate keyword arguments."""
    return dict(
        max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
        min_p=p.min_p, seed=p.seed, presence_penalty=p.presence_penalty,
        frequency_penalty=p.frequency_penalty, stop=list(p.stop), logprobs=p.logprobs,
        top_logprobs=p.top_logprobs,
    )
