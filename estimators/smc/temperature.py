"""Temperature rules of a tempered SMC step: how far the next step moves λ towards 1.

``adaptive`` picks the increment by bisection on the conditional ESS (the SG-AIS and AIS ladder);
``all_at_once`` takes the whole way in one step (sequential SGHMC: one predictive average).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from modelcompare.estimators.smc.weights import conditional_ess_normalized, log_normalize

# The smallest increment a rule takes, as a fraction of the way left: a smaller one stalls the
# ladder (``tempered.step`` raises).
SMALLEST_STEP = 1e-12
# Fewer particles' worth of weight than this surviving the smallest step: the ladder stalls.
FEWEST_SURVIVORS = 1.0


def next_increment(
    log_weights: Tensor,
    log_likelihood: Tensor,
    remaining: float,
    target_fraction: float,
    tolerance: float = 1e-4,
    max_iterations: int = 60,
) -> float:
    """Largest Δ ≤ ``remaining`` whose incremental weights exp(Δ·ℓ_i) keep the conditional ESS
    at ``target_fraction``·M (Jasra et al. 2011; Zhou, Johansen & Aston 2016, sec. 3.3).

    CESS(Δ) decreases in Δ, so bisection on [0, remaining] converges; it stops once CESS/M is
    within ``tolerance`` of the target.

    Particles whose likelihood of the piece is negligibly small beside the others' (a spread of
    ~10¹² nats or more: a move left them far out in the tails) lose their weight at any step:
    with their weight fraction p gone, CESS(Δ) = (1 − p)·CESS_S(Δ), CESS_S that of the
    survivors. No Δ then keeps the target when p > 1 − target; the survivors' CESS is kept at it
    instead, from the smallest step on. The step's increment log Σ W_i w_i counts the weight
    lost, so log Ẑ stays consistent. 0 when less than ``FEWEST_SURVIVORS`` particles' worth of
    weight would survive.
    """
    m = log_weights.shape[0]
    normalized = log_normalize(log_weights)  # the same at every Δ tried

    def fraction(delta: float) -> float:
        return conditional_ess_normalized(normalized, delta * log_likelihood) / m

    if fraction(remaining) >= target_fraction:
        return remaining
    smallest = SMALLEST_STEP * remaining
    surviving = fraction(smallest)
    if surviving * m < FEWEST_SURVIVORS:
        return 0.0
    low, high = 0.0, remaining
    if surviving < target_fraction:  # the survivors' CESS at the target
        target_fraction, tolerance = target_fraction * surviving, tolerance * surviving
        low = smallest
    for _ in range(max_iterations):
        mid = 0.5 * (low + high)
        value = fraction(mid)
        if abs(value - target_fraction) < tolerance:
            return mid
        if value > target_fraction:
            low = mid
        else:
            high = mid
    return low if low > 0.0 else 0.5 * (low + high)


# (normalised log-weights (M,), the piece's log-likelihood (M,), 1 − λ) -> the increment Δ
TemperatureRule = Callable[[Tensor, Tensor, float], float]


def adaptive(target_fraction: float) -> TemperatureRule:
    """Δ keeping the conditional ESS at ``target_fraction``·M (``next_increment``)."""

    def rule(log_weights: Tensor, log_likelihood: Tensor, remaining: float) -> float:
        return next_increment(log_weights, log_likelihood, remaining, target_fraction)

    return rule


def all_at_once(log_weights: Tensor, log_likelihood: Tensor, remaining: float) -> float:
    return remaining
