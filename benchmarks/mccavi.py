"""MC-CAVI: the ELBO, a lower bound on log Z, next to the exact log Z and SG-AIS.

1. Normal model with unknown mean and precision (NIG regression on an intercept alone) and NIG
   regression with 3 inputs, N = 10 … 10^5: MC-CAVI ELBO, the closed-form CAVI optimum, the
   exact log Z, the gap log Z − ELBO (the mean-field KL), iterations, final Monte Carlo size.
2. Gaussian mixture (K = 2 components, 1-D and 2-D, two clusters): the MC-CAVI ELBO against the
   exact log Z by enumerating all 2^n assignments (n = 14), against log Z by importance sampling
   from the label-symmetrised CAVI q (100,000 draws, the model's own prior and likelihood), and
   against SG-AIS log Ẑ ± σ (64 particles, default settings): the sandwich ELBO ≤ log Ẑ + 3σ.

    python benchmarks/mccavi.py [--quick]

Writes benchmarks/results/mccavi.json.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from typing import Any

import torch
from _common import environment, set_threads, table, verdict, write_json

from modelcompare.estimators import OnlineEvidence, Rows
from modelcompare.estimators.variational.mccavi import mccavi_elbo
from modelcompare.models import GaussianMixture, LinearRegressionUnknownNoise
from modelcompare.models.gamma_poisson import sample_log_gamma
from modelcompare.models.mixture_mean_field import (
    KAPPA0,
    MixtureQ,
    exact_expectations,
    global_factors,
    initial_responsibilities,
    responsibilities,
)

F64 = torch.float64


def gaussian_rows(sizes: list[int]) -> list[dict[str, Any]]:
    results = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, 3, generator=g, dtype=F64)
        noise = 0.7 * torch.randn(n, generator=g, dtype=F64)
        # The normal model is NIG regression without inputs (design Φ = 1); its exact log Z is
        # that of the dim-1 regression with x ≡ 0 (the slope is inert).
        cases = [
            ("normal", LinearRegressionUnknownNoise(1), torch.zeros(n, 1, dtype=F64),
             torch.zeros(n, 0, dtype=F64), 1.5 + noise),
            ("nig_regression_3", LinearRegressionUnknownNoise(3), x, x,
             x @ torch.tensor([0.5, -1.0, 2.0], dtype=F64) + 0.3 + noise),
        ]
        for name, model, x_model, inputs, y in cases:
            oracle = OnlineEvidence(model, method="exact")  # closed form, sequential stats
            oracle.update(x_model, y)
            exact = oracle.log_evidence
            started = time.perf_counter()
            result = mccavi_elbo(model, Rows(inputs, y), torch.Generator().manual_seed(0))
            seconds = time.perf_counter() - started
            optimum = model.mean_field().cavi_elbo(inputs, y, torch.Generator())
            results.append({
                "model": name, "n": n, "elbo": result.elbo,
                "cavi_optimum": optimum, "exact": exact,
                "gap": exact - result.elbo, "iterations": result.iterations,
                "draws": result.draws, "converged": result.converged,
                "acceptance": result.acceptance_rate, "seconds": seconds,
            })
    return results


def two_clusters(n: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=F64)
    x[: n // 2] = 0.5 * x[: n // 2] - 2.0
    x[n // 2 :] += 2.0
    return x[torch.randperm(n, generator=g)]


def enumerated_log_z(x: torch.Tensor, components: int) -> float:
    """Exact log p(x): Σ over all K^n assignments of Dirichlet–multinomial × Normal–Gamma."""
    n = x.shape[0]
    z = torch.tensor(list(itertools.product(range(components), repeat=n)))
    onehot = torch.nn.functional.one_hot(z, components).to(F64)
    counts = onehot.sum(1)
    s1, s2 = (torch.einsum("snk,nd->skd", onehot, v) for v in (x, x**2))
    kappa, a = KAPPA0 + counts[..., None], 1.0 + counts[..., None] / 2
    b = 1.0 + 0.5 * (s2 - s1**2 / kappa)
    log_marginal = (torch.lgamma(a) - a * torch.log(b) + 0.5 * torch.log(KAPPA0 / kappa)
                    - 0.5 * counts[..., None] * math.log(2 * math.pi)).sum((1, 2))
    log_pz = (math.lgamma(components) - math.lgamma(n + components)
              + torch.lgamma(1.0 + counts).sum(1))
    return float(torch.logsumexp(log_marginal + log_pz, 0))


def log_normal_gamma(mu: torch.Tensor, rho: torch.Tensor, q: MixtureQ) -> torch.Tensor:
    """Σ_kj log NormalGamma(μ_kj, ρ_kj; m, κ, a, b) per sample."""
    return (q.a * torch.log(q.b) - torch.lgamma(q.a) + (q.a - 1) * torch.log(rho) - q.b * rho
            + 0.5 * torch.log(q.kappa * rho / (2 * math.pi))
            - 0.5 * q.kappa * rho * (mu - q.m) ** 2).sum((-1, -2))


def importance_log_z(x: torch.Tensor, components: int, samples: int,
                     generator: torch.Generator) -> tuple[float, float]:
    """log Z by importance sampling from the CAVI q symmetrised over the K! label orders, with
    the model's own ``log_prior`` and ``log_likelihood`` in θ = (ALR logits, μ, log σ²): an
    oracle independent of the ELBO formulas. Returns (log Ẑ, ESS / samples)."""
    model, k, d = GaussianMixture(x.shape[1], components), components, x.shape[1]
    r = initial_responsibilities(x, k, torch.Generator().manual_seed(0))
    for _ in range(300):
        r = responsibilities(x, exact_expectations(global_factors(x, r)))
    q = global_factors(x, r)
    log_g = torch.stack([sample_log_gamma(float(a), samples, generator) for a in q.alpha], 1)
    log_pi = log_g - torch.logsumexp(log_g, 1, keepdim=True)
    log_rho = torch.stack([sample_log_gamma(float(a), samples, generator)
                           for a in q.a.reshape(-1)], 1).reshape(samples, k, d) - torch.log(q.b)
    rho = torch.exp(log_rho)
    mu = q.m + torch.randn(samples, k, d, generator=generator, dtype=F64) / torch.sqrt(
        q.kappa * rho)
    order = torch.stack([torch.randperm(k, generator=generator) for _ in range(samples)])
    log_pi = log_pi.gather(1, order)
    mu, rho = (v.gather(1, order[:, :, None].expand(-1, -1, d)) for v in (mu, rho))
    log_q = []
    for perm in itertools.permutations(range(k)):
        qp = MixtureQ(*(v[list(perm)] for v in q))
        dirichlet = (torch.lgamma(qp.alpha.sum()) - torch.lgamma(qp.alpha).sum()
                     + ((qp.alpha - 1) * log_pi).sum(-1))
        log_q.append(dirichlet + log_normal_gamma(mu, rho, qp))
    # Density of θ: the (π, μ, ρ) density times |∂(π_<K, μ, ρ)/∂θ| = Π_k π_k · Π ρ.
    log_q_theta = (torch.logsumexp(torch.stack(log_q), 0) - math.log(math.factorial(k))
                   + log_pi.sum(-1) + torch.log(rho).sum((-1, -2)))
    theta = torch.cat([(log_pi[:, :-1] - log_pi[:, -1:]), mu.reshape(samples, -1),
                       -torch.log(rho).reshape(samples, -1)], 1)
    log_joint = model.log_prior(theta)
    for start in range(0, x.shape[0], 50):
        log_joint = log_joint + model.log_likelihood(theta, x[start : start + 50], None).sum(-1)
    log_w = log_joint - log_q_theta
    weights = torch.softmax(log_w, 0)
    ess = 1.0 / float((weights**2).sum()) / samples
    return float(torch.logsumexp(log_w, 0) - math.log(samples)), ess


def mixture_rows(sizes: list[int], dims: list[int], particles: int) -> list[dict[str, Any]]:
    results = []
    for dim in dims:
        for n in [14, *sizes]:
            x = two_clusters(n, dim, 100 * dim + n)
            started = time.perf_counter()
            model = GaussianMixture(dim, 2)
            result = mccavi_elbo(model, Rows(x, None), torch.Generator().manual_seed(0))
            seconds = time.perf_counter() - started
            reference = model.mean_field().cavi_elbo(x, None, torch.Generator().manual_seed(0))
            row: dict[str, Any] = {
                "dim": dim, "n": n, "elbo": result.elbo, "cavi_reference": reference,
                "iterations": result.iterations, "draws": result.draws,
                "converged": result.converged, "seconds": seconds,
                "exact": enumerated_log_z(x, 2) if n <= 14 else None,
            }
            row["importance"], row["importance_ess"] = importance_log_z(
                x, 2, 100_000, torch.Generator().manual_seed(n))
            started = time.perf_counter()
            tracker = OnlineEvidence(GaussianMixture(dim, 2), particles=particles, seed=0)
            for start in range(0, n, 100):
                tracker.update(x[start : start + 100])
            row.update(sgais=tracker.log_evidence, sgais_stderr=tracker.log_evidence_stderr,
                       sgais_seconds=time.perf_counter() - started)
            row["sandwich_ok"] = row["elbo"] <= row["sgais"] + 3 * row["sgais_stderr"]
            results.append(row)
            print(f"  mixture d={dim} n={n}: ELBO {row['elbo']:.2f}, SG-AIS "
                  f"{row['sgais']:.2f} ± {row['sgais_stderr']:.2f}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--particles", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    gaussian_sizes = [10, 100, 1000] if args.quick else [10, 100, 1000, 10_000, 100_000]
    mixture_sizes = [100] if args.quick else [50, 200, 1000]

    gaussian = gaussian_rows(gaussian_sizes)
    print("Normal model and NIG regression: MC-CAVI ELBO ≤ CAVI optimum ≤ exact log Z")
    print(table(["model", "N", "ELBO", "CAVI opt", "exact log Z", "gap", "iters", "draws", "s"],
                [[r["model"], r["n"], r["elbo"], r["cavi_optimum"], r["exact"], r["gap"],
                  r["iterations"], r["draws"], r["seconds"]] for r in gaussian]))
    bound_ok = all(r["elbo"] <= r["cavi_optimum"] + 1e-9 <= r["exact"] for r in gaussian)
    print(f"ELBO ≤ optimum ≤ exact everywhere: {verdict(bound_ok)}\n")

    mixture = mixture_rows(mixture_sizes, [1, 2], args.particles)
    print("Gaussian mixture, K = 2: ELBO against exact log Z (n = 14) and SG-AIS")
    print(table(["d", "N", "ELBO", "CAVI ref", "exact", "IS log Z", "IS ESS", "SG-AIS", "± σ",
                 "ELBO ≤ Ẑ+3σ", "iters", "s MC-CAVI", "s SG-AIS"],
                [[r["dim"], r["n"], r["elbo"], r["cavi_reference"],
                  math.nan if r["exact"] is None else r["exact"], r["importance"],
                  r["importance_ess"], r["sgais"], r["sgais_stderr"],
                  verdict(r["sandwich_ok"]), r["iterations"], r["seconds"],
                  r["sgais_seconds"]] for r in mixture]))
    exact_ok = all(r["elbo"] < r["exact"] for r in mixture if r["exact"] is not None)
    sandwich_ok = all(r["sandwich_ok"] for r in mixture)
    print(f"ELBO < exact log Z (enumeration): {verdict(exact_ok)}; "
          f"ELBO ≤ SG-AIS + 3σ everywhere: {verdict(sandwich_ok)}")

    path = write_json("mccavi", {
        "environment": environment(args.threads),
        "gaussian": gaussian,
        "mixture": mixture,
        "verdicts": {"gaussian_bounds": bound_ok, "mixture_below_exact": exact_ok,
                     "mixture_sandwich": sandwich_ok},
    }, args.output)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
