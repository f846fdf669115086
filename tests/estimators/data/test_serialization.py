"""States to bytes and back: bit-exact, dtype-preserving, no pickle, wrong field sets refused."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from modelcompare.estimators import (
    ExactState,
    OnlineEvidence,
    ParticleState,
    state_from_bytes,
    state_to_bytes,
)
from modelcompare.estimators.data.serialization import (
    leaves,
    read_safetensors,
    state_to_tensors,
)
from modelcompare.models import LinearRegression


def trained(method: str, **given: object) -> OnlineEvidence:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(
        60, generator=g, dtype=torch.float64
    )
    settings = ({"particles": 16} if method == "sgais" else {}) | given
    tracker = OnlineEvidence(LinearRegression(2), method=method, seed=3, **settings)
    tracker.update(x, y)
    return tracker


@pytest.mark.parametrize("method", ["sgais", "exact"])
def test_round_trip_is_bit_exact(method: str) -> None:
    state = trained(method).state
    data = state_to_bytes(state)
    restored = state_from_bytes(type(state), data)
    assert type(restored) is type(state)
    for name, original in leaves(state).items():
        copy = leaves(restored)[name]
        assert copy.dtype == original.dtype and copy.shape == original.shape, name
        # Bitwise: compare the raw bytes, so NaN payloads and signed zeros count too.
        assert original.numpy().tobytes() == copy.numpy().tobytes(), name
    assert state_to_bytes(restored) == data


def test_format_is_safetensors_not_pickle() -> None:
    data = state_to_bytes(trained("sgais").state)
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_length])
    assert header["__metadata__"]["type"] == "ParticleState"
    assert set(header) - {"__metadata__"} == {
        "particles", "log_weights", "log_evidence", "log_evidence_variance", "n_observations",
        "anchor_point", "anchor_grad", "anchor_rows", "restart_rows", "astray_rows",
        "reestimate_exact_steps", "eves", "eve_weights", "lost_eves",
    }
    assert b"\x80\x04" not in data[:2]  # no pickle protocol marker up front


def test_wrong_field_sets_are_refused() -> None:
    sgais_bytes = state_to_bytes(trained("sgais").state)
    exact_bytes = state_to_bytes(trained("exact").state)
    with pytest.raises(ValueError):
        state_from_bytes(ExactState, sgais_bytes)
    with pytest.raises(ValueError):
        state_from_bytes(ParticleState, exact_bytes)
    state = trained("sgais").state
    partial = state_to_bytes(ExactState(state.particles, state.log_evidence, state.n_observations))
    with pytest.raises(ValueError):
        state_from_bytes(ParticleState, partial)


def test_a_field_added_after_a_state_was_stored_loads_with_its_default() -> None:
    """States stored before ``restart_rows``, ``astray_rows`` and ``reestimate_exact_steps``
    existed load with 0 there (the exact phase's steps not known: no ladder test), and
    before the Eves (``eves``, ``eve_weights``, ``lost_eves``) with none (the particles are their
    own); a field the type does not know is still refused."""
    state = trained("sgais").state
    tensors = state_to_tensors(state)
    assert tensors["eves"].shape == tensors["eve_weights"].shape == (16,)
    assert int(tensors["reestimate_exact_steps"]) > 0
    for name in ("restart_rows", "astray_rows", "reestimate_exact_steps", "eves", "eve_weights",
                 "lost_eves"):
        del tensors[name]
    restored = state_from_bytes(ParticleState, save(tensors, metadata={"type": "ParticleState"}))
    assert int(restored.reestimate.last_rows) == 0 and int(restored.reestimate.astray_rows) == 0
    assert int(restored.reestimate.exact_steps) == 0
    assert restored.genealogy.eves.numel() == restored.genealogy.eve_weights.numel() == 0
    assert float(restored.genealogy.lost_eves) == 0
    assert torch.equal(restored.particles, state.particles)
    tensors["unknown"] = torch.zeros(())
    with pytest.raises(ValueError, match="unknown"):
        state_from_bytes(ParticleState, save(tensors, metadata={"type": "ParticleState"}))


def test_the_pooled_mass_is_stored_once_it_holds_a_covariance() -> None:
    """A stream that never pools (default settings at D ≤ 44, or still in its exact phase)
    stores no ``mass_`` keys, so its bytes are those of a state from before the pool existed;
    one that pools stores its D × D covariance and degrees of freedom, bit-exact."""
    assert not [key for key in state_to_tensors(trained("sgais", mass_clouds=3).state)
                if key.startswith("mass_")]
    pooled = trained("sgais", mass_clouds=3, full_batch_rows=20).state
    tensors = state_to_tensors(pooled)
    assert tensors["mass_covariance"].shape == (3, 3) and float(tensors["mass_inverse_samples"]) > 0
    restored = state_from_bytes(ParticleState, state_to_bytes(pooled))
    assert torch.equal(restored.mass.covariance, pooled.mass.covariance)
    assert torch.equal(restored.mass.inverse_samples, pooled.mass.inverse_samples)
    assert state_to_bytes(restored) == state_to_bytes(pooled)


def test_online_evidence_save_load_round_trip_and_identity_check() -> None:
    tracker = trained("sgais")
    other = OnlineEvidence(LinearRegression(2), particles=16, seed=tracker.seed)
    other.load(tracker.save())
    # (save() bytes themselves are not compared: safetensors orders metadata keys arbitrarily.)
    assert other.state_bytes() == tracker.state_bytes()
    assert torch.equal(other._history.rows().x, tracker._history.rows().x)
    assert other.log_evidence == tracker.log_evidence
    assert other.n_observations == tracker.n_observations == 60
    stranger = OnlineEvidence(LinearRegression(2), particles=16, seed=tracker.seed + 1)
    with pytest.raises(ValueError):
        stranger.load(tracker.save())
    with pytest.raises(ValueError):
        stranger.load(b"not safetensors")
    assert stranger.n_observations == 0


STORED = Path(__file__).with_name("stored_states")


@pytest.mark.parametrize("name", sorted(p.stem for p in STORED.glob("*.safetensors")))
def test_states_stored_with_the_flat_record_load_and_store_the_same_bytes(name: str) -> None:
    """Particle states written before the state had a core and slots (a careful-ladder stream, a
    re-estimated one, two islands, hybrid, sequential, minibatch_mh; ``stored_states/``) load
    into the slots and store again as the very same tensors, with the one field added since
    (``reestimate_exact_steps``) at its default, 0."""
    data = (STORED / f"{name}.safetensors").read_bytes()
    state = state_from_bytes(ParticleState, data)
    _, tensors = read_safetensors(data)
    _, again = read_safetensors(state_to_bytes(state))
    added = again.pop("reestimate_exact_steps")
    assert int(added) == 0 and added.shape == state.reestimate.exact_steps.shape
    assert again.keys() == tensors.keys()
    for key, value in tensors.items():
        assert value.dtype == again[key].dtype and value.numpy().tobytes() == (
            again[key].numpy().tobytes()), key
    assert torch.equal(state.anchor.point, tensors["anchor_point"])
    assert torch.equal(state.reestimate.last_rows, tensors["restart_rows"])
    assert torch.equal(state.genealogy.eves, tensors["eves"])
