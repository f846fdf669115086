"""OnlineEvidence: replay determinism, resumption, chunk splitting, input validation, config."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from modelcompare.estimators import (
    EstimatorConfigError,
    InMemoryHistory,
    OnlineEvidence,
    Rows,
    build,
    exact_log_evidence,
    state_from_bytes,
    state_to_bytes,
)
from modelcompare.estimators.data.history import ColumnView
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.data.schedule import split_points
from modelcompare.models import BetaBernoulli, LinearRegression, LogisticRegression

CHUNKS = [(0, 30), (30, 31), (31, 130), (130, 200), (200, 260), (260, 300)]


def wide_stream(rows: int, seed: int, columns: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """x with ``columns`` columns; y depends on the first two (the model reads those)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, columns, generator=g, dtype=torch.float64)
    y = 0.8 * x[:, 0] - 0.5 * x[:, 1] + 0.3 + torch.randn(rows, generator=g, dtype=torch.float64)
    return x, y


def feed(tracker: OnlineEvidence, x, y, chunks=CHUNKS) -> list:
    return [tracker.update(x[a:b], y[a:b]) for a, b in chunks]


# --- replay determinism and resumption --------------------------------------------------------


@pytest.mark.parametrize("method", ["sgais", "exact"])
def test_replay_is_bit_identical(method: str) -> None:
    x, y = wide_stream(300, 0)
    runs = []
    for _ in range(2):
        tracker = OnlineEvidence(LinearRegression(2), method=method, seed=11, name="small")
        infos = feed(tracker, x, y)
        runs.append((tracker.state_bytes(), [dataclasses.asdict(i) for i in infos]))
    assert runs[0][0] == runs[1][0]
    assert str(runs[0][1]) == str(runs[1][1])  # str: NaN fields compare equal as text


def test_seed_and_name_change_the_randomness() -> None:
    x, y = wide_stream(60, 1)
    states = set()
    for seed, name in [(0, "a"), (1, "a"), (0, "b")]:
        tracker = OnlineEvidence(LinearRegression(2), seed=seed, name=name)
        tracker.update(x, y)
        states.add(tracker.state_bytes())
    assert len(states) == 3


def test_resume_from_state_bytes_equals_uninterrupted_run() -> None:
    """What a worker does after a crash: state from bytes, history from its store, and the
    generator of update k derived from (seed, name, k) — the contract OnlineEvidence follows."""
    x, y = wide_stream(300, 2)
    model = LinearRegression(2)
    uninterrupted = OnlineEvidence(model, seed=5, name="m")
    feed(uninterrupted, x, y)

    before = OnlineEvidence(model, seed=5, name="m")
    feed(before, x, y, CHUNKS[:3])
    saved = before.state_bytes()
    del before  # the crash

    estimator = build(model, "sgais", particles=64)
    state = state_from_bytes(estimator.state_type, saved)
    history = InMemoryHistory(x.shape[1])
    history.append(Rows(x[: CHUNKS[2][1]], y[: CHUNKS[2][1]]))
    view = ColumnView(history, [0, 1])
    for k, (a, b) in enumerate(CHUNKS[3:], start=3):
        rows = Rows(x[a:b], y[a:b])
        state, _ = estimator.update(state, view.select(rows), view, derive_generator(5, "m", k))
        history.append(rows)
    assert state_to_bytes(state) == uninterrupted.state_bytes()


def test_online_evidence_resumes_mid_stream() -> None:
    x, y = wide_stream(300, 3)
    uninterrupted = OnlineEvidence(LinearRegression(2), seed=6)
    feed(uninterrupted, x, y)
    before = OnlineEvidence(LinearRegression(2), seed=6)
    feed(before, x, y, CHUNKS[:3])
    resumed = OnlineEvidence(LinearRegression(2), seed=6)
    resumed.load(before.save())
    feed(resumed, x, y, CHUNKS[3:])
    assert resumed.state_bytes() == uninterrupted.state_bytes()


@pytest.mark.slow
def test_columns_select_what_the_model_reads() -> None:
    """A model over columns [2, 0] of a wide stream is the same run as over those columns."""
    x, y = wide_stream(200, 4)
    picked = OnlineEvidence(LinearRegression(2), seed=1, columns=[2, 0], name="m")
    narrow = OnlineEvidence(LinearRegression(2), seed=1, name="m")
    feed(picked, x, y, CHUNKS[:4])
    feed(narrow, x[:, [2, 0]], y, CHUNKS[:4])
    assert picked.state_bytes() == narrow.state_bytes()
    prediction = picked.predict(x[:3])
    assert prediction.mean.shape == (3,) and bool((prediction.variance > 1.0).all())
    with pytest.raises(ValueError):
        OnlineEvidence(LinearRegression(2), columns=[0, 1, 2])


# --- chunk splitting --------------------------------------------------------------------------


def schedule_pieces(rows: int) -> list[tuple[int, int]]:
    return list(split_points(0, rows))


@pytest.mark.slow
def test_big_post_is_split_on_the_schedule_boundaries() -> None:
    """One POST of 3000 rows = the same rows POSTed in schedule-sized pieces: same number of
    sub-chunks (each piece is one), same n; covers all three regimes (20, n/4, 500).
    Cheap settings: the boundaries do not depend on them."""
    x, y = wide_stream(3000, 5, columns=2)
    cheap = {"particles": 8, "steps": 1, "full_batch_rows": 100}
    big = OnlineEvidence(LinearRegression(2), seed=0, **cheap)
    info = big.update(x, y)
    pieces = schedule_pieces(3000)
    assert info.sub_chunks == len(pieces) and info.rows == 3000
    assert big.n_observations == 3000
    sizes = [b - a for a, b in pieces]
    assert sizes[:6] == [20, 20, 20, 20, 20, 25] and sizes[-3:] == [449, 500, 254]

    small = OnlineEvidence(LinearRegression(2), seed=0, **cheap)
    infos = feed(small, x, y, pieces)
    assert all(i.sub_chunks == 1 for i in infos)
    assert sum(i.sub_chunks for i in infos) == info.sub_chunks
    assert small.n_observations == 3000
    # POSTs that straddle schedule boundaries are cut where the schedule says, per POST.
    odd = OnlineEvidence(LinearRegression(2), seed=0, **cheap)
    cuts = [(0, 7), (7, 1500), (1500, 3000)]
    infos = feed(odd, x, y, cuts)
    for (a, b), i in zip(cuts, infos, strict=True):
        assert i.sub_chunks == len(list(split_points(a, b - a)))
    assert odd.n_observations == 3000


@pytest.mark.slow
def test_big_post_and_pieces_agree_statistically() -> None:
    """Default settings, N = 600: one POST vs schedule pieces use different random streams, so
    they agree only statistically. Each run is within its reported error of the exact value
    (SG-AIS vs exact, as in test_sgais.py); their difference has no bias and its sd is at most
    sqrt(se₁² + se₂²) (~1.2× that measured), so 4 of those bound it per seed."""
    model = LinearRegression(2)
    diffs, scales = [], []
    for seed in range(3):
        x, y = wide_stream(600, 10 + seed, columns=2)
        exact = exact_log_evidence(model, x, y)
        big = OnlineEvidence(model, seed=seed)
        big.update(x, y)
        small = OnlineEvidence(model, seed=seed)
        feed(small, x, y, schedule_pieces(600))
        assert big.n_observations == small.n_observations == 600
        scale = math.hypot(big.log_evidence_stderr, small.log_evidence_stderr)
        diffs.append(big.log_evidence - small.log_evidence)
        scales.append(scale)
        for run in (big, small):
            assert abs(run.log_evidence - exact) <= 0.75 + 4.0 * run.log_evidence_stderr
        assert abs(diffs[-1]) <= 4.0 * scale
    assert abs(sum(diffs)) <= 3.0 * math.sqrt(sum(s * s for s in scales))


# --- input validation -------------------------------------------------------------------------

BAD_INPUTS = {
    "nan in y": ([[0.0, 1.0], [1.0, 2.0]], [0.5, float("nan")]),
    "inf in x": ([[0.0, float("inf")], [1.0, 2.0]], [0.5, 1.0]),
    "ragged x": ([[0.0, 1.0], [1.0]], [0.5, 1.0]),
    "rows differ": ([[0.0, 1.0], [1.0, 2.0]], [0.5, 1.0, 2.0]),
    "too few columns": ([[0.0], [1.0]], [0.5, 1.0]),
    "x is 3-d": (np.zeros((2, 2, 1)), [0.5, 1.0]),
    "y is 2-d": ([[0.0, 1.0], [1.0, 2.0]], [[0.5], [1.0]]),
    "no x": (None, [0.5, 1.0]),
    "no rows": (np.zeros((0, 2)), []),
    "nothing": (None, None),
    "text": ([["a", "b"]], [1.0]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_rejected_and_changes_nothing(case: str) -> None:
    x, y = wide_stream(40, 6, columns=2)
    tracker = OnlineEvidence(LinearRegression(2), seed=2)
    tracker.update(x[:20], y[:20])
    before = tracker.state_bytes()
    with pytest.raises(ValueError):
        tracker.update(*BAD_INPUTS[case])
    assert tracker.state_bytes() == before and tracker.n_observations == 20
    # The rejected call consumed no randomness: the next chunk is as if it never happened.
    tracker.update(x[20:], y[20:])
    reference = OnlineEvidence(LinearRegression(2), seed=2)
    reference.update(x[:20], y[:20])
    reference.update(x[20:], y[20:])
    assert tracker.state_bytes() == reference.state_bytes()


@pytest.mark.parametrize(
    ("model", "x", "y"),
    [
        (BetaBernoulli(), None, [0.0, 2.0]),
        (BetaBernoulli(), None, [0.0, 0.5]),
        (LogisticRegression(2, classes=3), [[0.0, 1.0], [1.0, 0.0]], [0.0, 3.0]),
        (LogisticRegression(2, classes=3), [[0.0, 1.0], [1.0, 0.0]], [0.0, -1.0]),
    ],
)
def test_data_outside_the_support_is_rejected(model, x, y) -> None:
    tracker = OnlineEvidence(model, particles=8)
    with pytest.raises(ValueError):
        tracker.update(x, y)
    assert tracker.n_observations == 0


def test_a_chunk_of_another_width_is_rejected_without_change() -> None:
    x, y = wide_stream(40, 7, columns=4)
    tracker = OnlineEvidence(LinearRegression(2), particles=8, seed=0)
    tracker.update(x[:20], y[:20])
    before = tracker.state_bytes()
    with pytest.raises(ValueError):
        tracker.update(x[20:, :3], y[20:])
    assert tracker.state_bytes() == before


@pytest.mark.slow
def test_inputs_may_be_lists_arrays_or_tensors() -> None:
    x, y = wide_stream(30, 8, columns=2)
    results = set()
    for convert in (
        lambda a: a,
        lambda a: a.numpy(),
        lambda a: a.tolist(),
        lambda a: tuple(a.tolist()),
    ):
        tracker = OnlineEvidence(LinearRegression(2), seed=0)
        tracker.update(convert(x), convert(y))
        results.add(tracker.state_bytes())
    assert len(results) == 1


# --- estimator configuration ------------------------------------------------------------------

BAD_SETTINGS = [
    {"method": "nope"},
    {"particles": 1},
    {"particles": "many"},
    {"steps": 0},
    {"lr": 0.0},
    {"lr": -1.0},
    {"lr": float("nan")},
    {"friction": 0.0},
    {"friction": 1.5},
    {"batch_size": 0},
    {"preconditioner": "diagonal"},
    {"ess_target": 0.0},
    {"ess_target": 1.0},
    {"resample_threshold": 1.5},
    {"resampling": "greedy"},
    {"max_annealing_steps": 0},
    {"full_batch_rows": -1},
    {"hmc_step": 0.0},
    {"hmc_moves": 0},
    {"no_such_setting": 1},
    {"method": "sequential", "ess_target": 0.5},  # an SG-AIS-only setting
    {"method": "exact", "steps": 3},
]


@pytest.mark.parametrize("settings", BAD_SETTINGS, ids=lambda s: ",".join(map(str, s.items())))
def test_bad_configuration_raises(settings: dict) -> None:
    settings = dict(settings)
    method = settings.pop("method", "sgais")
    with pytest.raises(EstimatorConfigError):
        OnlineEvidence(LinearRegression(2), method=method, **settings)
    with pytest.raises(EstimatorConfigError):
        build(LinearRegression(2), method, **settings)


def test_exact_method_for_non_conjugate_model_raises() -> None:
    with pytest.raises(EstimatorConfigError):
        OnlineEvidence(LogisticRegression(2, classes=2), method="exact")


@pytest.mark.parametrize(
    "settings",
    [{"particles": 64.5}, {"steps": 2.5}, {"batch_size": 10.5}, {"lr": float("inf")}],
    ids=lambda s: ",".join(map(str, s.items())),
)
def test_non_integer_counts_and_infinite_rates_raise(settings: dict) -> None:
    with pytest.raises(EstimatorConfigError):
        tracker = OnlineEvidence(LinearRegression(2), **settings)
        tracker.update([[0.0, 1.0]] * 30, [1.0] * 30)
