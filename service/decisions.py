"""Decision rules evaluated after every applied chunk: pure functions from the progress record
to the next one, with the events of the rules that changed state (docs/guide/decisions.md).

A rule's value is tested k = ``stderrs`` standard errors on the cautious side of its threshold:
log BF − k·se > above, log BF + k·se < below; a posterior probability with its model's log Z
lowered and every other model's raised by k of their own standard errors; another model leads
the best one by more than k standard errors of their log Bayes factor. A rule fires once its
condition has held on ``for_chunks`` consecutive chunks and clears on the first chunk it does
not hold (an unreliable model stays unreliable; best_changed fires on each change and never
clears). A rule is not evaluated on a chunk where a model it names is missing, catching up,
failed or without log Z: its state carries over unchanged.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from modelcompare.service.events import EventRecord, Figure, event_id
from modelcompare.service.evidence import posterior_probabilities
from modelcompare.service.progress import ComparisonProgress, RuleState
from modelcompare.service.records import ComparisonSpec
from modelcompare.service.rules import BayesFactorTest, ProbabilityTest, RuleSpec
from modelcompare.service.window import slide, span


class Test(NamedTuple):
    """A rule's condition on one chunk: whether it holds (None: not evaluated), the figures it
    was decided on, and the rule's state with what this chunk added (window checkpoints)."""

    holds: bool | None
    figures: dict[str, Figure]
    state: RuleState


def decide(spec: ComparisonSpec, progress: ComparisonProgress,
           time: float) -> tuple[ComparisonProgress, list[EventRecord]]:
    """The record with each rule of ``spec`` evaluated on the chunk it has just applied (rules
    no longer in the spec lose their state), and the events of those that fired or cleared."""
    states: dict[str, RuleState] = {}
    events: list[EventRecord] = []
    for rule in spec.rules:
        state = progress.rules.get(rule.name, RuleState())
        if rule.when.best_changed is not None:
            states[rule.name], kind, figures = best_changed(spec, progress, rule, state)
        else:
            states[rule.name], kind, figures = threshold_rule(spec, progress, rule, state)
        if kind is not None:
            events.append(EventRecord(
                id=event_id(spec.id, progress.sequence, rule.name), comparison=spec.id,
                rule=rule.name, kind=kind, sequence=progress.sequence,
                n_observations=progress.n_observations, time=time, when=rule.when,
                for_chunks=rule.for_chunks, stderrs=rule.stderrs, figures=figures))
    return progress.model_copy(update={"rules": states}), events


Step = tuple[RuleState, str | None, dict[str, Figure]]


def threshold_rule(spec: ComparisonSpec, progress: ComparisonProgress, rule: RuleSpec,
                   state: RuleState) -> Step:
    """A rule that fires while its condition holds and clears when it stops."""
    holds, figures, state = condition(spec, progress, rule, state)
    if holds is None:
        return state, None, figures
    if not holds:
        return (state.model_copy(update={"streak": 0, "firing": False}),
                "cleared" if state.firing else None, figures)
    streak = state.streak + 1
    fires = not state.firing and streak >= rule.for_chunks
    return (state.model_copy(update={"streak": streak, "firing": state.firing or fires}),
            "fired" if fires else None, figures)


def best_changed(spec: ComparisonSpec, progress: ComparisonProgress, rule: RuleSpec,
                 state: RuleState) -> Step:
    """Fires when a model other than the best one this rule last saw leads it by the margin on
    ``for_chunks`` consecutive chunks; that model is then the best. The first chunk, or the
    best model leaving, only records the best."""
    scores = _scores(spec, progress)
    if not scores:
        return state, None, {}
    leader = max(scores, key=lambda name: scores[name][0])
    if state.best not in scores:
        return RuleState(best=leader), None, {}
    if leader == state.best:
        return state.model_copy(update={"streak": 0}), None, {}
    (lead, lead_se), (best, best_se) = scores[leader], scores[state.best]
    value, stderr = lead - best, math.hypot(lead_se, best_se)
    figures: dict[str, Figure] = {"from": state.best, "to": leader, "value": value,
                                  "stderr": stderr, "bound": value - rule.stderrs * stderr}
    if value - rule.stderrs * stderr <= 0.0:
        return state.model_copy(update={"streak": 0}), None, figures
    streak = state.streak + 1
    if streak < rule.for_chunks:
        return state.model_copy(update={"streak": streak}), None, figures
    return RuleState(best=leader), "fired", figures


def condition(spec: ComparisonSpec, progress: ComparisonProgress, rule: RuleSpec,
              state: RuleState) -> Test:
    when = rule.when
    if when.unreliable is not None:
        model = progress.models.get(when.unreliable.model)
        if model is None:
            return Test(None, {}, state)
        return Test(not model.reliability.reliable, {"reason": model.reliability.reason}, state)
    if when.posterior_probability is not None:
        return Test(*probability(spec, progress, when.posterior_probability, rule.stderrs),
                    state)
    test = when.log_bayes_factor or when.window_log_bayes_factor
    assert test is not None
    a, b = (_comparable(progress, name) for name in (test.model, test.against))
    if a is None or b is None:
        return Test(None, {}, state)
    value, variance = a.log_z - b.log_z, a.stderr ** 2 + b.stderr ** 2
    figures: dict[str, Figure] = {}
    if when.window_log_bayes_factor is not None:
        rows = when.window_log_bayes_factor.rows
        if a.reestimated or b.reestimated:  # log Z estimated again: the window starts here
            return Test(None, {}, state.model_copy(update={
                "checkpoints": ((a.n_observations, value, variance),)}))
        points = slide(state.checkpoints, (a.n_observations, value, variance), rows)
        state = state.model_copy(update={"checkpoints": points})
        window = span(points)
        value, variance = window.log_evidence, window.log_evidence_stderr ** 2
        figures["rows"] = window.rows
    return Test(*against_threshold(test, value, math.sqrt(variance), rule.stderrs, figures),
                state)


def against_threshold(test: BayesFactorTest, value: float, stderr: float, k: float,
                      figures: dict[str, Figure]) -> tuple[bool, dict[str, Figure]]:
    """Whether a log Bayes factor ``value`` ± ``stderr`` passes ``test``'s threshold moved k
    standard errors to the cautious side, and the figures of that decision (also read by
    benchmarks/decisions.py, which runs the service's rule on simulated streams)."""
    if test.above is not None:
        bound, holds = value - k * stderr, value - k * stderr > test.above
    else:
        assert test.below is not None
        bound, holds = value + k * stderr, value + k * stderr < test.below
    return holds, {"value": value, "stderr": stderr, "bound": bound,
                   "threshold": test.above if test.above is not None else test.below, **figures}


def probability(spec: ComparisonSpec, progress: ComparisonProgress, test: ProbabilityTest,
                k: float) -> tuple[bool | None, dict[str, Figure]]:
    """The posterior probability of ``test.model`` and its cautious bound: its log Z − k·se
    against every other model's log Z + k·se."""
    scores = _scores(spec, progress)
    if test.model not in scores:
        return None, {}
    shifted = {name: score + (-k if name == test.model else k) * se
               for name, (score, se) in scores.items()}
    top = max(shifted.values())
    bound = math.exp(shifted[test.model] - top) / sum(math.exp(s - top) for s in shifted.values())
    value = posterior_probabilities(spec, progress)[test.model]
    return bound > test.above, {"value": value, "bound": bound, "threshold": test.above}


def _scores(spec: ComparisonSpec, progress: ComparisonProgress) -> dict[str, tuple[float, float]]:
    """log Z + log prior weight and the stderr of each comparable model."""
    found = {m.name: (m, _comparable(progress, m.name)) for m in spec.models}
    return {name: (reading.log_z + math.log(m.prior_weight), reading.stderr)
            for name, (m, reading) in found.items() if reading is not None}


class Comparable(NamedTuple):
    log_z: float
    stderr: float
    n_observations: int
    reestimated: bool


def _comparable(progress: ComparisonProgress, name: str) -> Comparable | None:
    """The model's log Z reading, when it is present, has seen every row and has one."""
    model = progress.models.get(name)
    if (model is None or model.catching_up or model.failed or model.log_evidence is None
            or model.log_evidence_stderr is None):
        return None
    return Comparable(model.log_evidence, model.log_evidence_stderr, model.n_observations,
                      bool((model.info or {}).get("reestimated")))
