"""The progress record (service/progress.py): pure reducers with exact numbers, its codec, and
the public evidence body as its projection (service/evidence.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from service_helpers import comparison_body

from modelcompare.service.core.config import Settings
from modelcompare.service.evidence import evidence_body
from modelcompare.service.progress import (
    ComparisonProgress,
    LastError,
    ModelProgress,
    Reading,
    Reliability,
    RuleState,
    Window,
    current,
    decode,
    encode,
)
from modelcompare.service.reducers import (
    after_chunk,
    after_reading,
    after_skip,
    halted,
    marked_failed,
    next_version,
    resumed,
    settled,
    started,
    with_model,
    without_model,
)
from modelcompare.service.schemas import ComparisonIn, comparison_spec

SETTINGS = Settings(evidence_window_rows=150, diverged_warning_fraction=0.1)


def reading(n: int, log_z: float, stderr: float, **info: Any) -> Reading:
    return Reading(log_evidence=log_z, log_evidence_stderr=stderr, n_observations=n, ess=12.5,
                   info=info or None)


def fresh(catching_up: bool = False) -> ModelProgress:
    return started(reading(0, 0.0, 0.0), catching_up)


def comparison(**models: ModelProgress) -> ComparisonProgress:
    return ComparisonProgress(version=4, sequence=2, n_observations=200, models=models)


def test_an_update_reads_the_model_and_advances_its_window_and_reliability() -> None:
    model = after_reading(fresh(), reading(100, -150.0, 0.5, diverged_fraction=0.0), 1,
                          SETTINGS)
    assert model.checkpoints == ((0, 0.0, 0.0), (100, -150.0, 0.25))
    assert model.window == Window(rows=100, log_evidence=-150.0, log_evidence_stderr=0.5)
    model = after_reading(model, reading(200, -290.0, 0.6, diverged_fraction=0.5), 2, SETTINGS)
    # the last checkpoint at least 150 rows back is the start: the window spans every row
    assert model.checkpoints == ((0, 0.0, 0.0), (100, -150.0, 0.25), (200, -290.0, 0.36))
    assert model.window == Window(rows=200, log_evidence=-290.0, log_evidence_stderr=0.6)
    assert (model.sequence, model.n_observations, model.ess) == (2, 200, 12.5)
    assert model.reliability == Reliability(
        reliable=False, max_diverged_fraction=0.5, diverged_updates=1, first_diverged_at=200,
        reason="1 update(s) undid more than 10% of their SGHMC trajectories as diverged (the "
        "first by row 200, at most 50%): the moves failed on this posterior, and log Z may be "
        "off by more than its standard error")
    model = after_reading(model, reading(300, -430.0, 0.75), 3, SETTINGS)
    assert model.checkpoints == ((100, -150.0, 0.25), (200, -290.0, 0.36), (300, -430.0, 0.5625))
    assert model.window == Window(rows=200, log_evidence=-280.0,
                                  log_evidence_stderr=math.sqrt(0.3125))


def test_the_elbo_carries_on_until_an_update_refreshes_it() -> None:
    refreshed = reading(64, -90.0, 0.1).model_copy(
        update={"refreshed_elbo": True, "elbo": -95.0, "elbo_n_observations": 64})
    model = after_reading(fresh(), refreshed, 1, SETTINGS)
    assert (model.elbo, model.elbo_n_observations) == (-95.0, 64)
    model = after_reading(model, reading(100, -140.0, 0.1), 2, SETTINGS)
    assert (model.elbo, model.elbo_n_observations) == (-95.0, 64)


def test_a_chunk_moves_the_joined_models_only_and_changes_no_record_it_was_given() -> None:
    before = marked_failed(comparison(a=fresh(), b=fresh(), late=fresh(catching_up=True)),
                           {"b": "chunk 2: broken"})
    before = before.model_copy(update={"status_reason": "halted earlier", "halted_at": 3})
    copy = before.model_copy(deep=True)
    assert before.joined == ["a"] and before.catching_up == 1
    after = after_chunk(before, {"a": reading(250, -300.0, 0.5)}, 3, 50, 0.25, SETTINGS)
    assert before == copy
    assert (after.sequence, after.n_observations, after.compute_seconds) == (3, 250, 0.25)
    assert (after.status_reason, after.halted_at, after.version) == (None, None, 4)
    assert after.models["a"].sequence == 3 and after.models["a"].log_evidence == -300.0
    assert after.models["b"] == before.models["b"] and after.models["b"].failed == (
        "chunk 2: broken")
    assert after.models["late"] == before.models["late"]
    assert next_version(after).version == 5


def test_a_skipped_chunk_is_left_out_and_the_comparison_says_so() -> None:
    before = comparison(a=fresh(), late=fresh(catching_up=True))
    once = after_skip(before, 3, "EstimatorError: no")
    twice = settled(after_skip(once, 4, "skipped by the operator"))
    assert once.last_error == LastError(sequence=3, message="EstimatorError: no")
    assert (once.sequence, once.n_observations, once.skipped_chunks) == (3, 200, 1)
    assert once.models["a"].sequence == 3 and once.models["late"].sequence == 0
    assert twice.status_reason == ("2 chunk(s) dead-lettered and skipped, their rows left out of "
                                   "the evidence (last: chunk 4, skipped by the operator)")
    assert settled(before.model_copy(update={"status_reason": "x"})).status_reason is None


def test_halt_and_resume() -> None:
    before = comparison(a=fresh()).model_copy(update={"compute_seconds": 1.5})
    stopped = halted(before, 3, "bad", "halted at chunk 3")
    assert (stopped.sequence, stopped.halted_at, stopped.compute_seconds) == (2, 3, None)
    assert stopped.last_error == LastError(sequence=3, message="bad")
    again = resumed(stopped, None)
    assert (again.halted_at, again.status_reason, again.last_error) == (None, None,
                                                                        stopped.last_error)


def test_adding_and_removing_models() -> None:
    before = comparison(a=fresh()).model_copy(update={"compute_seconds": 1.5})
    added = with_model(before, "late", fresh(catching_up=True))
    assert list(added.models) == ["a", "late"] and added.compute_seconds is None
    assert list(without_model(added, "a").models) == ["late"]


def test_the_record_round_trips_exactly_and_only_at_its_version() -> None:
    model = after_reading(fresh(), reading(100, -150.123456789012345, 0.1 + 0.2), 1, SETTINGS)
    progress = comparison(a=model, b=marked_failed(comparison(b=fresh()), {"b": "x"}).models["b"])
    assert decode(encode(progress)) == progress
    assert current(encode(progress), 4) == progress
    assert current(encode(progress), 5) is None and current(None, 4) is None


def test_a_record_without_rule_states_is_stored_as_before_rules_existed() -> None:
    # workers of the previous version forbid unknown fields: they read such a record
    plain = comparison(a=fresh())
    assert "rules" not in json.loads(encode(plain))
    ruled = plain.model_copy(update={"rules": {"promote": RuleState(firing=True, streak=2)}})
    assert json.loads(encode(ruled))["rules"]["promote"]["streak"] == 2
    assert decode(encode(plain)) == plain and decode(encode(ruled)) == ruled


def spec_of(**priors: float) -> Any:
    body = comparison_body("sgais")
    models = [{**m, "prior_probability": priors[m["name"]]} for m in body["models"]]
    return comparison_spec(ComparisonIn.model_validate({**body, "models": models}), "cid", 0.0,
                           Settings().limits)


def test_the_body_is_a_projection_of_the_record() -> None:
    spec = spec_of(right=0.5, too_few=0.25, wrong_noise=0.25)
    right = after_reading(fresh(), reading(100, -150.0, 0.3), 1, SETTINGS)
    too_few = after_reading(fresh(), reading(100, -152.0, 0.4), 1, SETTINGS)
    late = fresh(catching_up=True)
    progress = comparison(right=right, too_few=too_few, wrong_noise=late).model_copy(
        update={"status_reason": "1 chunk(s) dead-lettered", "skipped_chunks": 1})
    body = evidence_body(spec, progress)
    models = {m["name"]: m for m in body["models"]}
    # softmax(log Z + log prior) over the models that saw every row
    odds = math.exp(2.0) * 2.0
    assert models["right"]["posterior_probability"] == pytest.approx(odds / (1 + odds), abs=0,
                                                                     rel=1e-15)
    assert models["wrong_noise"]["posterior_probability"] is None
    assert [m["prior_probability"] for m in body["models"]] == [0.5, 0.25, 0.25]
    assert models["too_few"]["window"] == {
        "rows": 100, "log_evidence": -152.0, "log_evidence_stderr": 0.4,
        "log_bayes_factor": -2.0, "log_bayes_factor_stderr": 0.5, "best": "right"}
    assert models["right"]["window"]["log_bayes_factor"] == 0.0
    assert models["wrong_noise"]["window"] is None
    assert (body["status"], body["skipped_chunks"], body["version"]) == ("degraded", 1, 4)
    assert all("window_checkpoints" not in m and "checkpoints" not in m for m in body["models"])
    assert models["right"]["reliability"] == Reliability().model_dump()
