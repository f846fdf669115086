"""benchmarks/segment_bias.py: runs from one shared start state, scored against exact answers."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from types import ModuleType

import pytest

from modelcompare.estimators import OnlineEvidence

BenchmarkModule = Callable[[str], ModuleType]  # the ``benchmark_module`` fixture (conftest)


@pytest.mark.slow
def test_runs_continue_one_shared_state_with_their_own_seed_against_the_exact_increment(
    benchmark_module: BenchmarkModule,
) -> None:
    segment_bias = benchmark_module("segment_bias")
    data = segment_bias.data_set("linear", "iid", 1_500, 0)
    state = segment_bias.start_state("linear", data, 1_000, 16)
    exact = OnlineEvidence(segment_bias.build("linear"), method="exact")
    exact.update(data.x[:1_000], data.y[:1_000])
    before = exact.log_evidence
    exact.update(data.x[1_000:], data.y[1_000:])
    truth = exact.log_evidence - before

    settings = {"particles": 16}
    first = segment_bias.segment_run("linear", data, 1_000, state, settings, 0, truth)
    again = segment_bias.segment_run("linear", data, 1_000, state, settings, 0, truth)
    other = segment_bias.segment_run("linear", data, 1_000, state, settings, 1, truth)

    assert first["increment"] == again["increment"]  # the seed alone decides a run
    assert first["chunks"] == again["chunks"]
    assert [c["annealing_steps"] > 0 for c in first["chunks"]] == [True]  # one 500-row chunk
    assert sum(c["increment"] for c in first["chunks"]) == pytest.approx(first["increment"])
    assert math.sqrt(sum(c["variance"] for c in first["chunks"])) == pytest.approx(
        first["stderr"]
    )
    # the exact per-chunk increments add up to the stretch's
    assert segment_bias.exact_chunk_increments(data, 1_000) == [pytest.approx(truth)]
    assert other["increment"] != first["increment"]
    assert first["error"] == pytest.approx(first["increment"] - truth)
    # 500 rows on 1000 with 16 particles: within a nat of the exact increment, a positive stderr
    assert abs(first["error"]) < 1.0 and abs(other["error"]) < 1.0
    assert 0.0 < first["stderr"] < 1.0


def test_summary_of_known_errors(benchmark_module: BenchmarkModule) -> None:
    segment_bias = benchmark_module("segment_bias")
    runs = [
        {"error": error, "stderr": 0.5, "seconds": seconds}
        for error, seconds in [(0.0, 1.0), (1.5, 2.0), (-0.5, 4.0)]
    ]
    found = segment_bias.summary(runs)
    assert found["runs"] == 3
    assert found["mean_error"] == pytest.approx(1 / 3)
    assert found["sd"] == pytest.approx(math.sqrt(((1 / 3) ** 2 + (7 / 6) ** 2 + (5 / 6) ** 2) / 2))
    assert found["mean_error_se"] == pytest.approx(found["sd"] / math.sqrt(3))
    assert found["rms_z"] == pytest.approx(math.sqrt((0 + 9 + 1) / 3))
    assert found["coverage"] == pytest.approx(2 / 3)  # z = 3 is outside ±2
    assert found["median_seconds"] == 2.0


def test_variants_are_name_equals_a_json_object(benchmark_module: BenchmarkModule) -> None:
    segment_bias = benchmark_module("segment_bias")
    assert segment_bias.variant('b={"batch_size": 400}') == ("b", {"batch_size": 400})
    assert segment_bias.variant("plain=") == ("plain", {})
    for bad in ['={"lr": 1}', "list=[1]"]:
        with pytest.raises(argparse.ArgumentTypeError):
            segment_bias.variant(bad)


def test_variance_budget_splits_the_total_into_chunks_and_covariance(
    benchmark_module: BenchmarkModule,
) -> None:
    segment_bias = benchmark_module("segment_bias")
    # two chunks whose increments move together across three runs
    increments = [(0.0, 0.0), (1.0, 2.0), (2.0, 1.0)]
    runs = [
        {"chunks": [{"increment": a, "variance": 0.25, "annealing_steps": 3},
                    {"increment": b, "variance": 0.75, "annealing_steps": 5}]}
        for a, b in increments
    ]
    found = segment_bias.variance_budget(runs)
    assert found["chunk_variance"] == pytest.approx(1.0 + 1.0)  # sample variances of each
    assert found["reported_chunk_variance"] == pytest.approx(1.0)
    assert found["total_variance"] == pytest.approx(3.0)  # totals 0, 3, 3
    assert found["between_chunks"] == pytest.approx(1.0)  # twice their covariance of 0.5

    rows = segment_bias.chunk_rows(runs, 2_000, [0.5, 1.0])
    assert rows[0][0] == "2000..2500" and rows[1][0] == "2500..3000"
    assert rows[0][1] == pytest.approx(1.0 - 0.5) and rows[1][1] == pytest.approx(0.0)
    assert rows[0][2] == pytest.approx(1.0 / math.sqrt(3))
    assert rows[0][3] == pytest.approx(1.0)
    assert rows[1][4] == pytest.approx(math.sqrt(0.75))
    assert rows[1][5] == pytest.approx(5.0)
    assert math.isnan(segment_bias.chunk_rows(runs, 2_000, None)[0][1])
