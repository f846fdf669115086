"""K independent particle systems ("islands") of one online method on one stream, their Ẑ
averaged.

Within one system the particles share their fate: resampling ties them into few lineages and
the moves act on one cloud, so where the cloud errs as a whole (it lags a drifting posterior),
raising M narrows the genealogy's stderr faster than the error (see docs/design/islands.md).
K systems of M particles that never exchange particles err independently. Each Ẑ_k is
unbiased for Z, so is their mean Ẑ̄ = Σ_k Ẑ_k / K, and to first order (the delta method)

    Var(Ẑ̄ / Z) ≈ Σ_k w_k² σ_k²,   w_k = Ẑ_k / Σ_j Ẑ_j,

with σ_k² system k's own variance of log Ẑ_k. The reported log Z is log Ẑ̄ + σ̄²/2, as for one
system (``estimator.lognormal_log_evidence``). The clouds join into one with weights w_k W_ik:
the K posterior approximations averaged, each weighted by its evidence.

The state is a ``ParticleState`` that holds the K systems side by side: ``particles`` (K·M, D)
and ``log_weights`` (K·M,) along the particle axis, the log-weights joined as above; every other
field gains a leading axis of K. An update runs the systems one after another, island k with a
generator derived from the update's and k: K islands cost K times one system.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.data.serialization import map_leaves, zip_leaves
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online.state import ParticleState
from modelcompare.estimators.smc.weights import log_normalize

InfoT = TypeVar("InfoT")
# (each island's Info, the joined state before the update, after it) -> one Info record
Combine = Callable[[list[InfoT], ParticleState, ParticleState], InfoT]


def averaged(log_evidences: Tensor, variances: Tensor) -> tuple[float, float]:
    """log Ẑ̄ = log Σ_k Ẑ_k / K from the systems' raw log Ẑ_k, and its delta-method variance
    Σ_k w_k² σ_k² (w_k = Ẑ_k / Σ_j Ẑ_j) from their variances σ_k² of log Ẑ_k."""
    shares = torch.softmax(log_evidences, 0)
    log_mean = float(torch.logsumexp(log_evidences, 0)) - math.log(log_evidences.shape[0])
    return log_mean, float((shares**2 * variances).sum())


def system_leaf(leaf: Tensor, k: int, count: int) -> Tensor:
    """System k's part of a joined state's field. A field that has no leading axis of ``count``
    is one no system has written yet: its default, in a state stored before the field existed
    (``data.serialization``), and every system's."""
    return leaf[k] if leaf.dim() and leaf.shape[0] == count else leaf


def split(state: ParticleState, count: int) -> list[ParticleState]:
    """The ``count`` systems of a joined state, each with its own normalised weights."""
    particles = state.particles.chunk(count)
    log_weights = state.log_weights.chunk(count)
    return [
        map_leaves(functools.partial(system_leaf, k=k, count=count), state)._replace(
            particles=particles[k], log_weights=log_normalize(log_weights[k])
        )
        for k in range(count)
    ]


def joined(states: list[ParticleState]) -> ParticleState:
    """The systems side by side; system k's weights W_ik scaled by its share w_k of Σ_j Ẑ_j."""
    log_shares = torch.log_softmax(torch.stack([s.log_evidence for s in states]), 0)
    return zip_leaves(torch.stack, states)._replace(
        particles=torch.cat([s.particles for s in states]),
        log_weights=torch.cat([s.log_weights + log_shares[k] for k, s in enumerate(states)]),
    )


def log_evidence(state: ParticleState) -> float:
    """log Ẑ̄ + σ̄²/2 (the lognormal correction of one system, applied to the average)."""
    log_mean, variance = averaged(state.log_evidence, state.log_evidence_variance)
    return log_mean + 0.5 * variance


def log_evidence_variance(state: ParticleState) -> float:
    return averaged(state.log_evidence, state.log_evidence_variance)[1]


def n_observations(state: ParticleState) -> int:
    return int(state.n_observations[0])


def islands(
    system: Estimator[ParticleState, InfoT], count: int, combine: Combine[InfoT]
) -> Estimator[ParticleState, InfoT]:
    """``count`` independent copies of the online particle method ``system`` as one estimator
    (``count`` 1: ``system`` itself)."""
    if count == 1:
        return system

    def generators(generator: torch.Generator) -> list[torch.Generator]:
        seed = int(torch.randint(1 << 62, (1,), generator=generator, device=generator.device))
        return [derive_generator(seed, "island", k, device=generator.device) for k in range(count)]

    def init(generator: torch.Generator) -> ParticleState:
        return joined([system.init(g) for g in generators(generator)])

    def update(
        state: ParticleState,
        chunk: Rows,
        history: History,
        generator: torch.Generator,
        deadline: Deadline | None = None,
    ) -> tuple[ParticleState, InfoT]:
        results = [
            system.update(island, chunk, history, g, deadline)
            for island, g in zip(split(state, count), generators(generator), strict=True)
        ]
        after = joined([new for new, _ in results])
        return after, combine([info for _, info in results], state, after)

    # ``ess`` and ``predict`` read the weighted cloud alone: the joined one serves as it is
    return Estimator(
        method=system.method,
        model=system.model,
        settings=system.settings,
        state_type=ParticleState,
        particles=count * system.particles,
        init=init,
        update=update,  # the systems' own updates read the chunk on their device
        log_evidence=log_evidence,
        log_evidence_variance=log_evidence_variance,
        n_observations=n_observations,
        ess=system.ess,
        predict=system.predict,
    )
