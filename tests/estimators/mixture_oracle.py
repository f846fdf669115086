"""Exact log evidence of the Gaussian mixture by enumeration, and small two-cluster data."""

from __future__ import annotations

import itertools
import math

import torch

from modelcompare.models.mixture_mean_field import KAPPA0

F64 = torch.float64


def exact_mixture_log_z(x: torch.Tensor, components: int) -> float:
    """log Σ_z p(z) p(x | z) over all K^n assignments: Dirichlet–multinomial p(z) times
    Normal–Gamma marginal likelihoods per component and dimension (BDA3 §3.3)."""
    n = x.shape[0]
    z = torch.tensor(list(itertools.product(range(components), repeat=n)))
    onehot = torch.nn.functional.one_hot(z, components).to(F64)
    counts = onehot.sum(1)
    s1 = torch.einsum("snk,nd->skd", onehot, x)
    s2 = torch.einsum("snk,nd->skd", onehot, x**2)
    kappa = KAPPA0 + counts[..., None]
    a = 1.0 + counts[..., None] / 2
    b = 1.0 + 0.5 * (s2 - s1**2 / kappa)
    log_marginal = (
        torch.lgamma(a)
        - a * torch.log(b)
        + 0.5 * torch.log(KAPPA0 / kappa)
        - 0.5 * counts[..., None] * math.log(2 * math.pi)
    ).sum((1, 2))
    log_pz = (
        math.lgamma(components) - math.lgamma(n + components) + torch.lgamma(1.0 + counts).sum(1)
    )
    return float(torch.logsumexp(log_marginal + log_pz, 0))


def two_clusters(rows: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g, dtype=F64)
    x[: rows // 2] = 0.5 * x[: rows // 2] - 2.0
    x[rows // 2 :] += 2.0
    return x[torch.randperm(rows, generator=g)]
