"""LLM engine metrics in vLLM's style, as Prometheus series `vigil_llm_*`, each labelled
with the `model_name` of the engine that served it (a server may serve several LLMs)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TIME_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MODEL = ["model_name"]


class LLMSeries:
    """The series of one registry, shared by the LLM engines that report to it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.running = Gauge("vigil_llm_num_requests_running", "Requests in the running batch", MODEL, registry=r)
        self.waiting = Gauge("vigil_llm_num_requests_waiting", "Requests waiting to run", MODEL, registry=r)
        self.kv_usage = Gauge("vigil_llm_kv_cache_usage_ratio", "Share of KV blocks in use", MODEL, registry=r)
        self.ttft = Histogram("vigil_llm_time_to_first_token_seconds", "Arrival to first token", MODEL, registry=r,
                              buckets=TIME_BUCKETS_S)
        self.itl = Histogram("vigil_llm_inter_token_latency_seconds", "Time between tokens", MODEL, registry=r,
                             buckets=TIME_BUCKETS_S)
        self.e2e = Histogram("vigil_llm_e2e_request_latency_seconds", "Arrival to last token", MODEL, registry=r,
                             buckets=TIME_BUCKETS_S)
        self.preemptions = Counter("vigil_llm_num_preemptions", "Requests preempted (recomputed later)", MODEL,
                                   registry=r)
        self.prompt_tokens = Counter("vigil_llm_prompt_tokens", "Prompt tokens received", MODEL, registry=r)
        self.generation_tokens = Counter("vigil_llm_generation_tokens", "Tokens generated", MODEL, registry=r)
        self.requests = Counter("vigil_llm_request_success", "Finished requests by reason",
                                [*MODEL, "finished_reason"], registry=r)
        self.rejected = Counter("vigil_llm_requests_rejected", "Requests refused because too many were waiting",
                                MODEL, registry=r)
        self.prefix_queries = Counter("vigil_llm_prefix_cache_queries", "Tokens of admitted requests looked up in "
                                      "the prefix cache", MODEL, registry=r)
        self.prefix_hits = Counter("vigil_llm_prefix_cache_hits", "Of those, tokens found (not computed again)",
                                   MODEL, registry=r)
        self.prefix_ratio = Gauge("vigil_llm_prefix_cache_hit_ratio", "Prefix cache hits / queries, in tokens, "
                                  "since start", MODEL, registry=r)


class LLMMetrics:
    """One engine's series: those of `series` (a registry of its own when None) labelled
    with its model's name."""

    SERIES = ("running", "waiting", "kv_usage", "ttft", "itl", "e2e", "preemptions", "prompt_tokens",
              "generation_tokens", "rejected", "prefix_queries", "prefix_hits", "prefix_ratio")

    def __init__(self, series: LLMSeries | None = None, model: str = "llm") -> None:
        self.series = series or LLMSeries()
        self.registry = self.series.registry
        self.model = model
        for name in self.SERIES:
            setattr(self, name, getattr(self.series, name).labels(model))
        self._queried = self._hit = 0

    def finished(self, reason: str, e2e_s: float, num_prompt: int, num_generated: int) -> None:
        self.series.requests.labels(self.model, reason).inc()
        self.e2e.observe(e2e_s)

    def prefix_cached(self, queried: int, hit: int) -> None:
        self._queried += queried
        self._hit += hit
        self.prefix_queries.inc(queried)
        self.prefix_hits.inc(hit)
        self.prefix_ratio.set(self._hit / self._queried if self._queried else 0.0)
