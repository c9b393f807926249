"""Prometheus metrics, one registry per app (so several apps in one process never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Seconds. TTFT spans queue wait + prefill; per-token spans one decode step.
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bw24_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("bw24_prompt_tokens", "Prompt tokens processed", registry=r)
        self.cached_tokens = Counter("bw24_cached_prompt_tokens",
                                     "Prompt tokens whose KV was reused from the previous request", registry=r)
        self.generated_tokens = Counter("bw24_generated_tokens", "Tokens generated", registry=r)
        self.cancelled = Counter("bw24_cancelled_generations", "Generations cancelled (client gone)",
                                 registry=r)
        self.queue_depth = Gauge("bw24_queue_depth", "Generation jobs waiting for the engine", registry=r)
        self.tokens_per_second = Gauge("bw24_decode_tokens_per_second",
                                       "Decode rate of the last finished generation", registry=r)
        self.ttft = Histogram("bw24_time_to_first_token_seconds",
                              "Time from request submission to its first generated token",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.token_latency = Histogram("bw24_time_per_output_token_seconds",
                                       "Time between consecutive generated tokens",
                                       buckets=_TOKEN_BUCKETS, registry=r)

        # Speculative decoding (--draft/--ngram/--mtp): jobs served by it, its draft tokens, and why not.
        self.spec_requests = Counter("bw24_speculative_requests", "Generations served by speculative decoding",
                                     registry=r)
        self.spec_drafted = Counter("bw24_speculative_drafted_tokens", "Draft tokens proposed for verification",
                                    registry=r)
        self.spec_accepted = Counter("bw24_speculative_accepted_tokens", "Draft tokens accepted by the verify",
                                     registry=r)
        self.spec_skipped = Counter("bw24_speculative_skipped_requests",
                                    "Generations served plainly although a drafter is configured, by reason "
                                    "(concurrent: another request active or queued; logprobs: asked for)",
                                    ["reason"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
