"""The ``minibatch_mh`` estimator: SG-AIS whose minibatch moves (n > ``full_batch_rows``) are
``steps`` of the random-walk minibatch-MH kernel (``modelcompare.estimators.moves.random_walk``),
with the weighted particle covariance's Cholesky factor as the proposal's shape (``kernels``).
"""

from __future__ import annotations

import functools

from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.assembly import online_estimator
from modelcompare.estimators.online.dimension import scaled_to_dimension
from modelcompare.estimators.online.kernel import PieceKernel, absorb
from modelcompare.estimators.online.kernels import exact_hmc, random_walk_mh
from modelcompare.estimators.online.reestimate import reestimating
from modelcompare.estimators.online.settings import MinibatchMHSettings
from modelcompare.estimators.online.sgais import SGAISInfo, annealed, annealing_info
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.online.surprise import surprise_moves
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
    kernel = PieceKernel(
        model=model,
        past=settings,
        full_batch_rows=settings.full_batch_rows,
        parts=functools.partial(parts, settings, relabeler(model)),
        max_steps=settings.max_annealing_steps,
        variance=standard_error.RULES[settings.standard_error],
        after=surprise_moves(scaled_to_dimension(settings, model.param_dim)),
    )
    fresh = functools.partial(init, model, settings)
    update = reestimating(kernel, settings, fresh, functools.partial(absorb, kernel))
    return online_estimator("minibatch_mh", model, settings, update, annealing_info)
