"""The ``minibatch_mh`` estimator: SG-AIS whose minibatch moves (n > ``full_batch_rows``) are
``steps`` of the random-walk minibatch-MH kernel (``modelcompare.estimators.moves.random_walk``),
with the weighted particle covariance's Cholesky factor as the proposal's shape (``kernels``).
"""

from __future__ import annotations

import functools

from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import particles
from modelcompare.estimators.online.kernels import exact_hmc, random_walk_mh
from modelcompare.estimators.online.records import ChunkLoop, ParticleState
from modelcompare.estimators.online.settings import MinibatchMHSettings
from modelcompare.estimators.online.sgais import SGAISInfo, annealed, annealing_info
from modelcompare.estimators.online.target import Piece
from modelcompare.estimators.smc.relabeling import Relabel, relabeler
from modelcompare.estimators.smc.tempered import TemperedSMC
from modelcompare.models import Model


def parts(settings: MinibatchMHSettings, relabel: Relabel | None, piece: Piece) -> TemperedSMC:
    if piece.past_in_full:
        move = exact_hmc(piece, settings.hmc, settings.gradient_precision)
    else:
        move = random_walk_mh(piece, settings.steps)
    return annealed(settings, relabel, piece, move)


def bind(model: Model, settings: MinibatchMHSettings) -> Estimator[ParticleState, SGAISInfo]:
    loop = ChunkLoop(
        model=model,
        past=settings,
        full_batch_rows=settings.full_batch_rows,
        parts=functools.partial(parts, settings, relabeler(model)),
        max_steps=settings.max_annealing_steps,
        standard_error=settings.standard_error,
        surprise=settings.surprise,
        restart=settings.restart,
        fresh=functools.partial(particles.init, model, settings),
    )

    return particles.online_estimator("minibatch_mh", settings, loop, annealing_info)
