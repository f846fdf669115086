"""Settings scaled to the number of parameters D (docs/design/moves.md, "Many parameters").

The defaults were chosen and calibrated on models of up to ``REFERENCE_PARAMETERS`` (44: the
softmax regression of benchmarks/calibration.py, 10 inputs × 4 classes); past it, the ones a
user did not set are scaled, and at or below it the settings are used as they are:

- the step-count triggers of the careful ladder and the surprise moves (``careful_steps``,
  ``surprise_steps``): by D / 44 for SGHMC methods, by √(D / 44) for minibatch MH. Both fire on
  a piece annealed in more than that many steps. An ESS-keeping ladder takes steps in proportion
  to the spread of the piece's log-likelihood over the particles, over the square root of each
  step's χ²; for r new rows after n, with θ − θ̂ ~ N(0, (n I₁)⁻¹), that spread's variance is the
  score term's D·r/n plus lower order, and the SGHMC methods' χ² falls as 44 / D (``LADDER``):
  an unsurprising piece takes D / 44 times more steps there, √(D / 44) times with a fixed χ².
  Left fixed, every piece past the exact phase turned "surprising" and "careful" at D = 81.
- the SGHMC learning rate ``lr`` by 44 / D, and its steps per move ``steps`` by √(D / 44). The
  invariant law of a discretised (SG)HMC differs from the target by O(η) in each whitened
  direction, O(η·D) summed over them: η·D is held. A move travels about steps·√η posterior
  spreads per direction: that is held too.
- for SGHMC moves, the past's minibatch (``batch_size``) by D / 44. In each whitened direction
  the minibatch gradient adds noise of a fraction ∝ η·D / b of the injected noise (each row's
  curvature spread over D directions, n / b rows a draw), and the noise friction removes most
  but not all of it: a move started on a linear-regression posterior (D = 161, b = 100) settles
  1.5% wide, 6.1% without the friction (``benchmarks/move_width.py``). An increment's error sums
  that excess over the D directions, so η·D² / b is held, and with η·D held, b ∝ D: 366 rows at
  D = 161, where the move settles 0.05% wide.
- for SGHMC moves, the rows of the exact phase (``full_batch_rows``) by D / 44, up to the
  setting's bound (2,000 rows), and its HMC transitions per annealing step (``hmc_moves``) by
  √(D / 44). The ladder of a piece of r rows after n grows as √(D·r/n·(1 + D/n)): the score's
  spread over the posterior, widened by the error D/n of the posterior mean in the residuals.
  Right after an exact phase of 500 rows, pieces of n/4 rows at D = 161 took 16–20 steps and
  turned careful (4× the particles, 60-step moves: 70 CPU s per 500 rows, against about 1 s for
  exact HMC moves there). Holding D/n at the switch keeps those pieces as short as at 44
  parameters. Each HMC transition travels a fixed distance in posterior spreads, and the
  distance a step must cover grows as the ladder's steps do: with 8 transitions the longer
  exact phase read softmax regression's log Z (105 parameters) 2.5 nats low on average, with
  12 1.0 nats (docs/design/moves.md, "Many parameters").
- for SGHMC methods, the annealing ladder's ``ess_target``: each step's χ² = 1/ESS − 1 (0.25 at
  0.8) by 44 / D, so 0.88 at D = 81 and 0.94 at D = 161. With M = 64 particles and D ≥ M the
  moves do not keep up with targets that move at the default pace: linear regression at D = 81
  read log Z 2.8 nats low over 4,000 rows even with exact HMC moves throughout (4 data sets),
  0.1 with ESS 0.9, 0.2 with 40 HMC transitions per step, 0.35 with 256 particles; the extra
  steps are extra moves (about 1.5–3× the steps per piece).
- for SGHMC moves, the noise friction's second-order term (``noise_estimate_variance``): the
  friction B̂ is estimated from R fresh rows, and its sampling error e heats the moves by about
  E[e²]/α² per direction (``moves.sghmc``), which grows with D/R and the rows' tails: Poisson
  regression with 100 inputs settled 1.8% wide at 3,000 rows, 0.4% with the term; linear
  regression at D = 161 0.05% and 0.03% (``benchmarks/move_width.py``). At D ≤ 44 the
  defaults were calibrated without it, and there the friction is often near its ceiling
  (softmax regression), where a second-order expansion in e/α does not hold.
- for SG-AIS and hybrid, the SGHMC mass matrix pooled over ``mass_clouds`` = ⌈2D / 44⌉ steps'
  clouds (``smc.mass``): at D > M the covariance of one cloud of M particles is singular and its
  narrow directions narrow the cloud further, which only the careful pieces' 4× particles
  countered before, at 35–49 CPU s a 500-row chunk at D = 161 (docs/design/moves.md, "Pooled
  clouds"). With the pool the careful pieces fire on long pieces only (the triggers above).
- for SG-AIS and hybrid, where a stream starts (``start``): from the Laplace approximation of
  its first rows' posterior (``gaussian_start``). From the prior the first rows' ladders grow
  with D (650 exact-HMC steps for the first 500 rows at D = 161), and M particles behind a mass
  estimated from them read log Z +1 to +2 nats high there; from the Gaussian one step reaches
  a linear regression's exact log Z. A label-symmetric model starts from the prior whatever
  this says (``sgais.laplace_start``).
"""

from __future__ import annotations

import math
from typing import TypeVar

import annotated_types

from modelcompare.estimators.online.extension_settings import SurpriseSettings
from modelcompare.estimators.online.settings import SGAISSettings, SGHMCSettings
from modelcompare.estimators.settings import Settings

REFERENCE_PARAMETERS = 44
# × D / 44 for SGHMC methods (their ladders are longer: ``LADDER``), else × √(D / 44)
TRIGGERS = ("careful_steps", "surprise_steps")
LADDER = ("ess_target",)  # its χ² = 1/ESS − 1 × 44 / D: SGHMC methods only
SGHMC_STEPS, SGHMC_RATE = ("steps",), ("lr",)  # × √(D / 44), × 44 / D: SGHMC moves only
# × D / 44 up to the field's bound, and × √(D / 44): for SGHMC moves only
EXACT_PHASE, EXACT_MOVES = ("full_batch_rows",), ("hmc_moves",)
PAST_BATCH = ("batch_size",)  # × D / 44 up to the field's bound: SGHMC moves only
POOLED_MASS = ("mass_clouds",)  # × ⌈2D / 44⌉: SG-AIS and hybrid
ESTIMATE_VARIANCE = ("noise_estimate_variance",)  # on: SGHMC moves only
START = ("start",)  # laplace: SG-AIS and hybrid

S = TypeVar("S", bound=SurpriseSettings)


def scaled_to_dimension(settings: S, param_dim: int) -> S:
    """``settings`` with the triggers, and for SGHMC moves their steps, rate, minibatch and
    friction and the exact phase's rows and moves, and the stream's start, that it left at their
    defaults scaled to ``param_dim`` parameters."""
    if param_dim <= REFERENCE_PARAMETERS:
        return settings
    ratio = param_dim / REFERENCE_PARAMETERS

    def unset(names: tuple[str, ...]) -> list[str]:
        return [name for name in names
                if name in type(settings).model_fields and name not in settings.model_fields_set]

    moves = isinstance(settings, SGHMCSettings)
    root_scaled = unset(SGHMC_STEPS + EXACT_MOVES if moves else TRIGGERS)
    inverse_scaled = unset(SGHMC_RATE) if moves else []
    linear_scaled = unset(TRIGGERS + EXACT_PHASE + PAST_BATCH) if moves else []
    update: dict[str, float] = {
        name: round(getattr(settings, name) * math.sqrt(ratio)) for name in root_scaled}
    update |= {name: getattr(settings, name) / ratio for name in inverse_scaled}
    # each step's χ² = 1/ESS − 1 (of its weights) × 44 / D
    update |= {name: 1.0 / (1.0 + (1.0 / getattr(settings, name) - 1.0) / ratio)
               for name in (unset(LADDER) if moves else [])}
    update |= {name: min(round(getattr(settings, name) * ratio), upper_bound(settings, name))
               for name in linear_scaled}
    update |= {
        name: min(getattr(settings, name) * math.ceil(2 * ratio), upper_bound(settings, name))
        for name in unset(POOLED_MASS)}
    update |= {name: True for name in (unset(ESTIMATE_VARIANCE) if moves else [])}
    update |= {name: "laplace" for name in unset(START)}
    return settings.model_copy(update=update)


def upper_bound(settings: Settings, name: str) -> float:
    """The largest value field ``name`` of ``settings`` accepts (its ``le``)."""
    return next(
        bound.le for bound in type(settings).model_fields[name].metadata
        if isinstance(bound, annotated_types.Le)
    )


def pools_mass(settings: Settings, param_dim: int) -> bool:
    """Whether a method with ``settings`` pools its moves' mass matrix (``smc.mass``) for a model
    of ``param_dim`` parameters, as scaled here, and so stores a D × D covariance with its
    state: SG-AIS and hybrid with ``mass_clouds`` > 1, given or scaled."""
    return isinstance(settings, SGAISSettings) and (
        scaled_to_dimension(settings, param_dim).mass_clouds > 1)
