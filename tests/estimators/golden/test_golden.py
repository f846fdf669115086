"""The golden streams: six seeded streams through the SG-AIS engine must give, chunk by chunk,
the very state bytes and Info records stored in ``expected/<platform>.json``.

They guard refactorings of the engine (SG-AIS reshaped into one piece kernel plus named
extensions): a change that is meant to leave results alone must leave every digest here as it
is. The streams (``golden_streams.STREAMS``), 15 chunks each, fed as the service feeds them:

- ``linear_iid``: linear regression, i.i.d. rows; the exact phase, then SGHMC on anchored
  minibatches, chunks cut into pieces by the schedule;
- ``linear_drift_careful``: linear regression with two change points, the careful ladder and
  the extra moves after a surprising piece switched on;
- ``softmax_score_controls``: 3-class softmax regression with anchored minibatch gradients and
  score controls of each piece's first increment;
- ``sorted_mixture_reestimate``: a sorted 1-D Gaussian mixture whose particles go astray and
  are re-estimated over the shuffled rows seen;
- ``linear_islands``: two islands;
- ``hybrid``: nested sampling on the first 30 rows, SG-AIS after.

Besides the digests, ``test_stream_exercises_its_mechanism`` checks from the Info records and
states that each stream still reaches the mechanism it guards (a stream that no longer did would
pass while protecting nothing), a second run in one process must give the same digests and
another engine seed other ones. The streams run on one torch thread, as the service's workers
do: on more, some reductions split differently and the softmax digests move.

The digests may only be regenerated (``python tests/estimators/golden/regenerate.py``) for a
change that is *meant* to alter results (a new default, a fixed bug, another random draw), never
to make a refactoring pass; the commit that does it says why the numbers moved.

Float results differ in their last digits across torch versions and CPU kinds (the vector width
of torch's and MKL's kernels: one ulp in a chunk's first moves, then chaos in the streams that
resample), so the digests are kept per platform, one file each under ``expected/``, named by
``golden_streams.platform_key()``. On a platform with no file the digest tests skip and say so;
add one by running ``regenerate.py`` there on unchanged engine code (main), then apply the change.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import golden_streams
import pytest
import torch
from golden_streams import STREAMS, Run, Stream, environment, run

EXPECTED = Path(__file__).with_name("expected")
NAMES = list(STREAMS)


@functools.cache
def stored_platforms() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in EXPECTED.glob("*.json")}


def expected() -> dict[str, Any]:
    """The digests of this platform; the test skips where none are stored."""
    key = golden_streams.platform_key()
    if key not in stored_platforms():
        pytest.skip(f"no golden digests for this platform ({key}); stored for "
                    f"{sorted(stored_platforms())}: run tests/estimators/golden/regenerate.py "
                    "on unchanged engine code to add them")
    return stored_platforms()[key]


@functools.cache
def golden_run(name: str) -> Run:
    return run(STREAMS[name])


def mismatch(name: str, found: list[dict[str, Any]], stored: list[dict[str, Any]]) -> str:
    """Where ``found`` first departs from ``stored``: the chunk, the state fields whose digests
    moved and the Info fields that changed."""
    for chunk, (new, old) in enumerate(zip(found, stored, strict=False)):
        if new != old:
            fields = [f for f in old["fields"] if new["fields"].get(f) != old["fields"][f]]
            fields += [f for f in new["fields"] if f not in old["fields"]]
            info = {
                key: (old["info"].get(key), new["info"].get(key))
                for key in sorted(old["info"].keys() | new["info"].keys())
                if old["info"].get(key) != new["info"].get(key)
            }
            return (
                f"{name}: chunk {chunk} departs from the stored digests; state fields moved: "
                f"{fields}; Info (stored, now): {info}; stored with {expected()['environment']}, "
                f"running on {environment()}"
            )
    return f"{name}: {len(found)} chunks, {len(stored)} stored"


@pytest.mark.parametrize("platform", sorted(stored_platforms()))
def test_each_digests_file_holds_every_stream_as_defined(platform: str) -> None:
    """Settings or sizes changed in ``golden_streams`` without regenerating show here first."""
    stored = stored_platforms()[platform]["streams"]
    assert list(stored) == NAMES
    for name, stream in STREAMS.items():
        model = stream.model()
        entry = stored[name]
        assert entry["model"] == model.config() | {"family": model.family}, name
        assert (entry["method"], entry["settings"]) == (stream.method, stream.settings), name
        assert (entry["chunk_rows"], entry["seed"], entry["data_seed"]) == (
            stream.chunk_rows, stream.seed, stream.data_seed
        ), name
        assert len(entry["chunks"]) == stream.chunks == golden_streams.CHUNKS, name


@pytest.mark.parametrize("name", NAMES)
def test_rows_are_those_stored(name: str) -> None:
    """The rows come from torch's generators: a torch that draws other numbers fails here, not
    as an engine change."""
    stream = STREAMS[name]
    data = stream.data(stream.rows, stream.data_seed)
    assert golden_streams.rows_digest(data) == expected()["streams"][name]["data_sha256"], (
        f"{name}: the stream's rows changed (torch {torch.__version__}; "
        f"stored with {expected()['environment']})"
    )


@pytest.mark.parametrize("name", NAMES)
def test_stream_is_bit_identical_to_the_stored_one(name: str) -> None:
    found = golden_run(name).chunks
    stored = expected()["streams"][name]["chunks"]
    # after a JSON round trip, as stored: Info floats are their repr strings
    assert json.loads(json.dumps(found)) == stored, mismatch(name, found, stored)


@pytest.mark.parametrize("name", NAMES)
def test_a_second_run_in_one_process_is_identical(name: str) -> None:
    assert run(STREAMS[name]).chunks == golden_run(name).chunks


def test_another_seed_changes_the_digests() -> None:
    """The harness can fail: the engine's seed reaches the state."""
    stream = STREAMS["linear_iid"]
    first = run(stream, chunks=2).chunks
    other = run(stream, seed=stream.seed + 1, chunks=2).chunks
    assert first == golden_run("linear_iid").chunks[:2]
    assert all(a["state_sha256"] != b["state_sha256"] for a, b in zip(first, other, strict=True))


# --- each stream reaches what it guards (from its Info records and states) -----------------


def rows_before(stream: Stream, chunk: int) -> int:
    return chunk * stream.chunk_rows


def after_exact_phase(stream: Stream, chunk: int) -> bool:
    """Whether every piece of the chunk reads the past in minibatches (SGHMC moves, anchors)."""
    return rows_before(stream, chunk) > stream.settings["full_batch_rows"]


def in_exact_phase(stream: Stream, chunk: int) -> bool:
    """Whether every piece of the chunk reads the past in full (exact HMC moves)."""
    return rows_before(stream, chunk + 1) <= stream.settings["full_batch_rows"]


def check_linear_iid(stream: Stream, found: Run) -> None:
    infos = found.infos
    exact = [i for i in range(stream.chunks) if in_exact_phase(stream, i)]
    later = [i for i in range(stream.chunks) if after_exact_phase(stream, i)]
    assert exact and later
    # exact HMC: Metropolis-tested, no SGHMC trajectory; then SGHMC on anchored minibatches
    assert all(infos[i].acceptance_rate == infos[i].acceptance_rate for i in exact)
    assert all(infos[i].diverged_fraction != infos[i].diverged_fraction for i in exact)
    assert all(infos[i].diverged_fraction == infos[i].diverged_fraction for i in later)
    assert all(infos[i].reanchors > 0 for i in later)
    assert max(info.sub_chunks for info in infos) >= 2  # a chunk cut by the schedule
    assert not any(info.reestimated for info in infos)


def check_linear_drift_careful(stream: Stream, found: Run) -> None:
    settings = stream.settings
    careful = [
        i
        for i, info in enumerate(found.infos)
        # after the exact phase, more steps than careful_steps in every piece on average: some
        # piece ran past careful_steps, where the careful parts take over (``careful``)
        if after_exact_phase(stream, i)
        and info.annealing_steps > settings["careful_steps"] * info.sub_chunks
    ]
    assert len(careful) >= 3, careful
    assert settings["careful_particles"] > 1  # the careful steps widen the cloud ...
    # ... and every piece ends back at M particles
    assert all(state.particles.shape[0] == settings["particles"] for state in found.states)
    extra = [i for i, info in enumerate(found.infos) if info.surprises and after_exact_phase(
        stream, i)]
    assert len(extra) >= 3 and settings["surprise_moves"] > 0, extra


def check_softmax_score_controls(stream: Stream, found: Run) -> None:
    model = stream.model()
    # the score controls apply where particles ≥ 4 × (parameters + 1) (``increment_control``)
    assert stream.settings["particles"] >= 4 * (model.param_dim + 1)
    assert stream.settings["increment_control"] == "score"
    # anchored minibatch gradients (control_variates) after the exact phase
    later = [i for i in range(stream.chunks) if after_exact_phase(stream, i)]
    assert later and all(found.infos[i].reanchors > 0 for i in later)
    # and the controls change the result: without them the first chunk already differs
    plain = dataclasses.replace(stream, settings={**stream.settings, "increment_control": "none"})
    without = run(plain, chunks=1)
    assert without.chunks[0]["state_sha256"] != found.chunks[0]["state_sha256"]
    assert (
        without.infos[0].log_evidence_increment != found.infos[0].log_evidence_increment
    )


def check_sorted_mixture_reestimate(stream: Stream, found: Run) -> None:
    reestimated = [i for i, info in enumerate(found.infos) if info.reestimated]
    assert reestimated, "no re-estimate"
    first = reestimated[0]
    # what made it due: a chunk after the exact phase left the particles astray (over 10% of
    # its SGHMC trajectories diverged, or the cloud frozen)
    assert any(
        info.diverged_fraction > 0.1 or info.spread < 1e-4 for info in found.infos[: first + 1]
    )
    assert int(found.states[first].reestimate.last_rows) == rows_before(stream, first + 1)


def check_linear_islands(stream: Stream, found: Run) -> None:
    count, particles = stream.settings["islands"], stream.settings["particles"]
    assert count == 2
    for state in found.states:
        assert state.particles.shape[0] == count * particles
        assert state.log_evidence.shape == state.n_observations.shape == (count,)
    final = found.states[-1]
    assert final.log_evidence[0] != final.log_evidence[1]  # independent systems
    assert all(int(n) == stream.rows for n in final.n_observations)


def check_hybrid(stream: Stream, found: Run) -> None:
    nested_rows = stream.settings["nested_rows"]
    phases = []
    for i, info in enumerate(found.infos):
        assert type(info).__name__ == "HybridInfo"
        before, after = rows_before(stream, i), rows_before(stream, i + 1)
        if after <= nested_rows:
            phases.append("nested")
            assert info.nested_iterations > 0 and info.annealing_steps == 0
        elif before < nested_rows:
            phases.append("crossing")
            assert info.nested_iterations > 0 and info.annealing_steps > 0
            assert info.sub_chunks >= 2
        else:
            phases.append("sgais")
            assert info.nested_iterations == 0 and info.annealing_steps > 0
    assert {"nested", "crossing", "sgais"} <= set(phases)


CHECKS = {
    "linear_iid": check_linear_iid,
    "linear_drift_careful": check_linear_drift_careful,
    "softmax_score_controls": check_softmax_score_controls,
    "sorted_mixture_reestimate": check_sorted_mixture_reestimate,
    "linear_islands": check_linear_islands,
    "hybrid": check_hybrid,
}


@pytest.mark.parametrize("name", NAMES)
def test_stream_exercises_its_mechanism(name: str) -> None:
    assert set(CHECKS) == set(STREAMS)
    CHECKS[name](STREAMS[name], golden_run(name))
