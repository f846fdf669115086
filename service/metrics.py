"""Prometheus metrics of one process (API and/or worker), on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from modelcompare.service.comparison_metrics import ComparisonFigures
from modelcompare.service.store.work_records import Commit


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.ingested = Counter(
            "modelcompare_chunks_ingested", "Chunks accepted by the API", registry=self.registry
        )
        self.processed = Counter(
            "modelcompare_chunks_processed", "Chunks applied by a worker", registry=self.registry
        )
        self.dead_lettered = Counter(
            "modelcompare_chunks_dead_lettered",
            "Chunks an estimator failed on, recorded and skipped",
            registry=self.registry,
        )
        self.helped = Counter(
            "modelcompare_model_updates_helped",
            "Model updates computed for a chunk another worker applies (parallel models)",
            registry=self.registry,
        )
        self.marked_unreliable = Counter(
            "modelcompare_models_marked_unreliable",
            "Models an update marked unreliable: their SGHMC moves diverged (docs/guide/api.md, "
            "'The evidence body')",
            registry=self.registry,
        )
        self.failed_models = Counter(
            "modelcompare_models_failed",
            "Models that failed and left their comparison: an update raised or lost finiteness "
            "on every attempt at a chunk (docs/guide/reliability.md), or a catch-up replay did",
            registry=self.registry,
        )
        self.left_alone = Counter(
            "modelcompare_comparisons_left_alone",
            "Passes in which a worker left a comparison alone, by the family of the model it "
            "cannot build (the family's plugin is not installed here, or its version cannot "
            "continue the comparison): one per comparison every failure_backoff_max s while "
            "it has chunks queued. Alert when it keeps rising: unless another worker has the "
            "plugin, the comparison's chunks wait (status 'waiting'); install the plugin on "
            "the workers",
            ["family"],
            registry=self.registry,
        )
        self.update_seconds = Histogram(
            "modelcompare_update_seconds",
            "Time to apply one chunk to every model, commit included",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "modelcompare_queue_depth",
            "Chunks ingested but not yet applied, per comparison (the metrics_max_comparisons "
            "deepest queues)",
            ["comparison"],
            registry=self.registry,
        )
        self.queued_chunks = Gauge(
            "modelcompare_queued_chunks",
            "Chunks ingested but not yet applied, all comparisons together",
            registry=self.registry,
        )
        self.webhook_deliveries = Counter(
            "modelcompare_webhook_deliveries",
            "Tries of webhook deliveries by outcome: delivered (a 2xx answer), retry (failed, "
            "due again after a backoff), dead (failed webhook_max_attempts times: listed at "
            "GET /v1/comparisons/{id}/deliveries?state=dead, replayable)",
            ["outcome"],
            registry=self.registry,
        )
        # per comparison and model: evidence, probabilities, rules (service/comparison_metrics.py)
        self.comparisons = ComparisonFigures()
        self.registry.register(self.comparisons)

    def observe(self, commit: Commit, seconds: float) -> None:
        """A worker's commit: its time, whether it applied or dead-lettered a chunk, and the
        models it marked unreliable or failed."""
        self.marked_unreliable.inc(len(commit.marked_unreliable))  # catch-up steps too
        self.failed_models.inc(len(commit.failed_models))
        if not commit.entry_id:
            return
        self.update_seconds.observe(seconds)
        if commit.dead_letter is not None:
            self.dead_lettered.inc()
        elif not commit.halt:
            self.processed.inc()
