"""Decision rules on hand-made progress records (service/decisions.py): each condition is tested
k standard errors on the cautious side of its threshold, to the exact figure."""

from __future__ import annotations

import math
from typing import Any

import pytest

from modelcompare.service.decisions import decide
from modelcompare.service.events import EventRecord
from modelcompare.service.progress import ComparisonProgress, ModelProgress, Reliability
from modelcompare.service.records import ComparisonSpec, ModelSpec
from modelcompare.service.rules import RuleIn


def spec(*rules: dict[str, Any]) -> ComparisonSpec:
    models = [ModelSpec(name=n, family="beta_bernoulli", config={}, columns=[], prior_weight=1.0)
              for n in ("a", "b", "c")]
    return ComparisonSpec(id="cmp", name="c", seed=0, created_at=0.0, x_dim=0, has_y=True,
                          estimator={"method": "sgais"}, models=models,
                          rules=[RuleIn.model_validate(r).spec(0.0) for r in rules])


def model(log_z: float, stderr: float, n: int, **fields: Any) -> ModelProgress:
    return ModelProgress(sequence=0, n_observations=n, log_evidence=log_z,
                         log_evidence_stderr=stderr, ess=None, info=None, **fields)


def step(cmp: ComparisonSpec, progress: ComparisonProgress, sequence: int,
         models: dict[str, ModelProgress]) -> tuple[ComparisonProgress, list[EventRecord]]:
    n = next(iter(models.values())).n_observations
    moved = progress.model_copy(update={"sequence": sequence, "n_observations": n,
                                        "models": models})
    return decide(cmp, moved, 1.5)


def start() -> ComparisonProgress:
    return ComparisonProgress(version=0, sequence=0, n_observations=0, models={})


def bf_rule(**test: Any) -> dict[str, Any]:
    return {"name": "r", "when": {"log_bayes_factor": {"model": "a", "against": "b", **test}}}


def test_the_bound_is_the_value_less_k_stderr_of_the_difference() -> None:
    cmp = spec({**bf_rule(above=3.0), "stderrs": 2.0})
    three = {"c": model(-50.0, 0.0, 10)}
    # log BF 5, stderr hypot(0.6, 0.8) = 1: bound 3, not above 3
    progress, events = step(cmp, start(), 1, {"a": model(-10.0, 0.6, 10),
                                              "b": model(-15.0, 0.8, 10), **three})
    assert events == [] and progress.rules["r"].streak == 0
    progress, events = step(cmp, progress, 2, {"a": model(-9.9, 0.6, 10),
                                               "b": model(-15.0, 0.8, 10), **three})
    (event,) = events
    assert (event.id, event.kind, event.sequence, event.time) == ("cmp:2:r", "fired", 2, 1.5)
    assert event.figures == {"value": pytest.approx(5.1), "stderr": pytest.approx(1.0),
                             "bound": pytest.approx(3.1), "threshold": 3.0}
    progress, events = step(cmp, progress, 3, {"a": model(-9.9, 0.6, 10),
                                               "b": model(-15.0, 0.8, 10), **three})
    assert events == [] and progress.rules["r"].firing
    progress, events = step(cmp, progress, 4, {"a": model(-9.9, 3.0, 10),
                                               "b": model(-15.0, 0.0, 10), **three})
    assert [e.kind for e in events] == ["cleared"] and not progress.rules["r"].firing


def test_below_adds_the_margin_and_for_chunks_counts_consecutive_chunks() -> None:
    cmp = spec({**bf_rule(below=-2.0), "stderrs": 1.0, "for_chunks": 2})
    other = {"c": model(0.0, 0.0, 5)}
    held = [(-3.0, 0.5), (-3.0, 1.5), (-3.0, 0.5), (-3.0, 0.5)]  # bound -2.5, -1.5, -2.5, -2.5
    progress, kinds = start(), []
    for sequence, (value, stderr) in enumerate(held, 1):
        progress, events = step(cmp, progress, sequence, {
            "a": model(value, stderr, 5), "b": model(0.0, 0.0, 5), **other})
        kinds += [(e.kind, e.sequence) for e in events]
    assert kinds == [("fired", 4)]


def test_a_model_catching_up_or_failed_leaves_the_rule_as_it_was() -> None:
    cmp = spec(bf_rule(above=0.0))
    progress, events = step(cmp, start(), 1, {
        "a": model(1.0, 0.0, 5), "b": model(0.0, 0.0, 5, catching_up=True),
        "c": model(0.0, 0.0, 5)})
    assert events == [] and progress.rules["r"].streak == 0
    progress, events = step(cmp, progress, 2, {
        "a": model(1.0, 0.0, 5), "b": model(0.0, 0.0, 5, failed="boom"),
        "c": model(0.0, 0.0, 5)})
    assert events == []


def test_the_posterior_probability_bound_moves_each_model_by_its_own_stderr() -> None:
    cmp = spec({"name": "p", "stderrs": 1.0,
                "when": {"posterior_probability": {"model": "a", "above": 0.9}}})
    models = {"a": model(0.0, 0.5, 5), "b": model(-4.0, 0.5, 5), "c": model(-5.0, 0.0, 5)}
    progress, events = step(cmp, start(), 1, models)
    (event,) = events
    bound = math.exp(-0.5) / (math.exp(-0.5) + math.exp(-3.5) + math.exp(-5.0))
    value = 1.0 / (1.0 + math.exp(-4.0) + math.exp(-5.0))
    assert event.figures == {"value": pytest.approx(value, rel=1e-12),
                             "bound": pytest.approx(bound, rel=1e-12), "threshold": 0.9}
    models["b"] = model(-2.0, 0.5, 5)  # bound 0.79: cleared
    progress, events = step(cmp, progress, 2, models)
    assert [e.kind for e in events] == ["cleared"]


def test_the_window_rule_reads_the_last_rows_of_both_models() -> None:
    rule = {"name": "w", "stderrs": 0.0, "when": {"window_log_bayes_factor": {
        "model": "a", "against": "b", "below": -1.5, "rows": 20}}}
    cmp = spec(rule)
    # log BF after 10, 20, 30 rows: 1, 0, -1; over the last 20 rows at 30 rows: -1 - 1 = -2
    progress, kinds = start(), []
    for sequence, value in enumerate((1.0, 0.0, -1.0), 1):
        progress, events = step(cmp, progress, sequence, {
            "a": model(value, 0.0, 10 * sequence), "b": model(0.0, 0.0, 10 * sequence),
            "c": model(-9.0, 0.0, 10 * sequence)})
        kinds += [(e.kind, e.sequence, e.figures["value"], e.figures["rows"]) for e in events]
    assert kinds == [("fired", 3, -2.0, 20)]


def test_best_changed_fires_once_the_lead_clears_the_margin() -> None:
    cmp = spec({"name": "best", "stderrs": 2.0, "when": {"best_changed": {}}})
    progress, events = step(cmp, start(), 1, {
        "a": model(0.0, 0.1, 5), "b": model(-1.0, 0.1, 5), "c": model(-9.0, 0.0, 5)})
    assert events == [] and progress.rules["best"].best == "a"
    progress, events = step(cmp, progress, 2, {  # b leads by 0.2 ± 0.5: not yet
        "a": model(0.0, 0.3, 5), "b": model(0.2, 0.4, 5), "c": model(-9.0, 0.0, 5)})
    assert events == [] and progress.rules["best"].best == "a"
    progress, events = step(cmp, progress, 3, {
        "a": model(0.0, 0.3, 5), "b": model(1.1, 0.4, 5), "c": model(-9.0, 0.0, 5)})
    (event,) = events
    assert event.figures == {"from": "a", "to": "b", "value": pytest.approx(1.1),
                             "stderr": pytest.approx(0.5), "bound": pytest.approx(0.1)}
    assert progress.rules["best"].best == "b"


def test_unreliable_fires_when_the_model_is_marked() -> None:
    cmp = spec({"name": "u", "when": {"unreliable": {"model": "b"}}})
    marked = Reliability(reliable=False, reason="diverged")
    _, events = step(cmp, start(), 1, {"a": model(0.0, 0.0, 5),
                                       "b": model(0.0, 0.0, 5, reliability=marked),
                                       "c": model(0.0, 0.0, 5)})
    assert [(e.kind, e.figures) for e in events] == [("fired", {"reason": "diverged"})]


def test_the_state_of_a_rule_no_longer_in_the_spec_goes() -> None:
    progress, _ = step(spec(bf_rule(above=0.0)), start(), 1, {
        "a": model(1.0, 0.0, 5), "b": model(0.0, 0.0, 5), "c": model(0.0, 0.0, 5)})
    assert progress.rules["r"].firing
    progress, events = step(spec(), progress, 2, dict(progress.models))
    assert progress.rules == {} and events == []
