"""Per-comparison figures on /metrics, so that Prometheus and Alertmanager can alert on them
without polling the API: per model log Z, its stderr, the log Bayes factor against the most
probable model, the posterior probability and the windowed log Bayes factor; per rule whether
it is firing; per comparison the decision events stored in all. Collected at scrape time from
what the store holds (service/store/exported.py), for the newest
``metrics_max_comparisons`` comparisons only: every comparison and model is a label value."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from modelcompare.service.store.exported import Exported

MODEL_GAUGES = {
    "log_evidence": "Running log evidence (log Z) of the model",
    "log_evidence_stderr": "Standard error of the model's log Z",
    "log_bayes_factor_vs_best": "log Z of the model minus that of the most probable model",
    "posterior_probability": "Posterior probability of the model",
    "window_log_bayes_factor": "Windowed log Bayes factor against the best model's window",
}


def model_figures(evidence: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per gauge of ``MODEL_GAUGES``, per model, the figures the evidence body has (a model
    without one, e.g. while it catches up, is left out)."""
    models = evidence["models"]
    ranked = [m for m in models if m["posterior_probability"] is not None
              and m["log_evidence"] is not None]
    best = max(ranked, key=lambda m: m["posterior_probability"], default=None)
    found: dict[str, dict[str, float]] = {name: {} for name in MODEL_GAUGES}
    for m in models:
        window = (m.get("window") or {}).get("log_bayes_factor")
        values = {
            "log_evidence": m["log_evidence"],
            "log_evidence_stderr": m["log_evidence_stderr"],
            "log_bayes_factor_vs_best": None if best is None or m not in ranked
            else m["log_evidence"] - best["log_evidence"],
            "posterior_probability": m["posterior_probability"],
            "window_log_bayes_factor": window,
        }
        for gauge, value in values.items():
            if value is not None:
                found[gauge][m["name"]] = value
    return found


class ComparisonFigures(Collector):
    """The figures of the comparisons ``update`` was last given."""

    def __init__(self) -> None:
        self.exported: list[Exported] = []

    def update(self, exported: list[Exported]) -> None:
        self.exported = exported

    def collect(self) -> Iterator[Metric]:
        gauges = {name: GaugeMetricFamily(f"modelcompare_{name}", text,
                                          labels=["comparison", "model"])
                  for name, text in MODEL_GAUGES.items()}
        firing = GaugeMetricFamily("modelcompare_rule_firing", "1 while the decision rule has "
                                   "fired and not cleared, else 0", labels=["comparison", "rule"])
        events = CounterMetricFamily("modelcompare_rule_events", "Decision events (rules that "
                                     "fired or cleared) stored for the comparison",
                                     labels=["comparison"])
        for item in self.exported:
            for name, values in model_figures(item.evidence).items():
                for model, value in values.items():
                    gauges[name].add_metric([item.cid, model], value)
            for rule, on in item.firing.items():
                firing.add_metric([item.cid, rule], float(on))
            events.add_metric([item.cid], item.events)
        yield from gauges.values()
        yield firing
        yield events
