"""ESS-adaptive tempering: the next temperature increment by bisection on the conditional ESS."""

from __future__ import annotations

from torch import Tensor

from estimators.weights import conditional_ess


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
    """
    m = log_weights.shape[0]

    def fraction(delta: float) -> float:
        return conditional_ess(log_weights, delta * log_likelihood) / m

    if fraction(remaining) >= target_fraction:
        return remaining
    low, high = 0.0, remaining
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
