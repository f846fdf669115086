"""Peer comparison: the log evidence of a Bayesian linear regression from BlackJAX's adaptive
tempered SMC.

Model (the same as ours): y = Xw + b + ε, ε ~ N(0, σ²) with σ = ``noise_std`` known, and
w_j, b ~ N(0, ``prior_std``²) i.i.d.; θ = (w, b) has D parameters (D − 1 inputs and the bias).

Method: ``blackjax.adaptive_tempered_smc`` (BlackJAX 1.7) tempers from the prior (λ = 0) to the
full posterior (λ = 1) through p(θ) p(y | θ)^λ, a batch method: every likelihood evaluation
runs over all N rows (no sufficient statistics). The particles start as draws from the prior.
Each SMC step resamples (systematic), moves every particle with ``mcmc_steps`` HMC transitions
targeting the current λ, then picks the next λ by bisection so that the incremental weights
keep an effective sample size of ``target_ess`` × particles, and reweights. BlackJAX reports
each step's log normalising-constant increment, log mean_i exp((λ' − λ) log p(y | θ_i)), in
``SMCInfo.log_likelihood_increment``; log Z is the sum of these increments over all steps.

Inner kernel: ``blackjax.hmc`` with 10 leapfrog steps and a fixed step size π/20, an
integration time of π/2 in units of the preconditioned scale. The preconditioner is the diagonal
inverse mass matrix, tuned between steps with ``blackjax.inner_kernel_tuning``: after each step
it is set to the per-coordinate variance of the particles under the step's new importance
weights, i.e. an estimate of the marginal variances of the very tempered posterior the next
step's HMC moves target; the first step (λ = 0) uses the prior variance prior_std². Every
tempered posterior of this model is Gaussian, so in preconditioned units it is close to N(0, I),
on which HMC run for time t maps x to x cos t + p sin t: t = π/2 makes the proposal nearly
independent of the start. (A step size D^(-1/4), i.e. t ≈ 3.3 at D = 81, is close to the t = π
resonance x ↦ −x that keeps |x|, hence the log likelihood, of the resampled particles: the
particles stay too concentrated and log Z came out 18 nats too high at D = 81, N = 10,000.) The
step size stays small enough for near-certain acceptance far beyond D = 100, so it is not
tuned; nothing else is either. The Python loop runs a jitted step until λ = 1 (at most 1,000
steps); CPU seconds are process time over the whole loop, the first step's (which includes
compilation) also reported on its own.

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        python benchmarks/peer_blackjax.py --dim 21 --rows 2000 --particles 512
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
import torch
from _common import linear_stream
from blackjax.smc.base import extend_params
from blackjax.smc.resampling import systematic

from modelcompare.estimators import exact_log_evidence
from modelcompare.models import LinearRegression

jax.config.update("jax_enable_x64", True)

LEAPFROG_STEPS = 10
TRAJECTORY = math.pi / 2  # HMC's integration time, in units of the preconditioned scale
MAX_STEPS = 1_000


def _design(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Φ = [X, 1] and y as float64 numpy arrays (from numpy arrays or CPU torch tensors)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return np.hstack([x, np.ones((x.shape[0], 1))]), y


def blackjax_log_evidence(
    x: Any,
    y: Any,
    noise_std: float,
    prior_std: float,
    particles: int,
    seed: int,
    target_ess: float = 0.5,
    mcmc_steps: int = 10,
) -> dict[str, float]:
    """Log evidence of the linear regression from BlackJAX's adaptive tempered SMC (see the
    module docstring for the settings).

    ``x`` (N, D − 1) and ``y`` (N,) are float64 numpy arrays or CPU torch tensors. Returns
    ``log_z``, ``cpu_seconds`` (process time of the whole SMC loop, compilation included),
    ``compile_cpu_seconds`` (the first step's, which compiles), ``tempering_steps``,
    ``particles`` and ``acceptance_rate`` (HMC's mean acceptance probability over all steps).
    Raises RuntimeError if λ has not reached 1 after 1,000 steps.
    """
    phi_np, y_np = _design(x, y)
    phi, targets = jnp.asarray(phi_np), jnp.asarray(y_np)
    rows, dim = phi_np.shape
    log_norm = -0.5 * rows * math.log(2.0 * math.pi * noise_std**2)

    def log_prior(theta: jax.Array) -> jax.Array:
        return jnp.sum(jax.scipy.stats.norm.logpdf(theta, 0.0, prior_std))

    def log_likelihood(theta: jax.Array) -> jax.Array:
        residual = targets - phi @ theta
        return log_norm - 0.5 * jnp.sum(residual**2) / noise_std**2

    def inverse_mass(key: jax.Array, state: Any, info: Any) -> dict[str, jax.Array]:
        del key, info
        mean = state.weights @ state.particles
        variance = state.weights @ (state.particles - mean) ** 2
        return extend_params({"inverse_mass_matrix": variance})

    hmc_step = blackjax.hmc.build_kernel()

    def mcmc_step(rng_key: jax.Array, state: Any, logdensity_fn: Any,
                  inverse_mass_matrix: jax.Array) -> tuple[Any, Any]:
        return hmc_step(rng_key, state, logdensity_fn, step_size=TRAJECTORY / LEAPFROG_STEPS,
                        inverse_mass_matrix=inverse_mass_matrix,
                        num_integration_steps=LEAPFROG_STEPS)

    smc = blackjax.inner_kernel_tuning(
        smc_algorithm=blackjax.adaptive_tempered_smc,
        logprior_fn=log_prior,
        loglikelihood_fn=log_likelihood,
        mcmc_step_fn=mcmc_step,
        mcmc_init_fn=blackjax.hmc.init,
        resampling_fn=systematic,
        mcmc_parameter_update_fn=inverse_mass,
        initial_parameter_value=extend_params(
            {"inverse_mass_matrix": jnp.full(dim, prior_std**2, dtype=jnp.float64)}),
        num_mcmc_steps=mcmc_steps,
        target_ess=target_ess,
    )
    key = jax.random.key(seed)
    start = prior_std * jax.random.normal(jax.random.fold_in(key, 0), (particles, dim))
    state = smc.init(start)
    # Strongly typed λ = 0 and inverse mass, so that the second step does not compile again.
    state = state._replace(sampler_state=state.sampler_state._replace(
        tempering_param=jnp.asarray(0.0, dtype=jnp.float64)))
    step = jax.jit(smc.step)

    log_z, acceptance, steps = 0.0, 0.0, 0
    began = time.process_time()
    while float(state.sampler_state.tempering_param) < 1.0:
        if steps == MAX_STEPS:
            raise RuntimeError(f"adaptive tempering did not reach λ = 1 in {MAX_STEPS} steps")
        state, info = step(jax.random.fold_in(key, steps + 1), state)
        log_z += float(info.log_likelihood_increment)
        acceptance += float(jnp.mean(info.update_info.acceptance_rate))
        steps += 1
        if steps == 1:
            compile_seconds = time.process_time() - began
    return {
        "log_z": log_z,
        "cpu_seconds": time.process_time() - began,
        "compile_cpu_seconds": compile_seconds,
        "tempering_steps": steps,
        "particles": particles,
        "acceptance_rate": acceptance / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=21, help="parameters D (inputs + bias)")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--particles", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mcmc-steps", type=int, default=10)
    args = parser.parse_args()
    x, y = (torch.cat(parts) for parts in zip(*linear_stream(args.rows, args.seed, args.dim - 1),
                                                  strict=True))
    model = LinearRegression(args.dim - 1, noise_std=1.0, prior_std=1.0)
    exact = exact_log_evidence(model, x, y)
    result = blackjax_log_evidence(x, y, 1.0, 1.0, args.particles, args.seed,
                                   mcmc_steps=args.mcmc_steps)
    print(f"D={args.dim} N={args.rows} particles={args.particles} mcmc_steps={args.mcmc_steps}")
    print(f"log Z {result['log_z']:.3f}  exact {exact:.3f}  error {result['log_z'] - exact:+.3f}")
    print(f"CPU s {result['cpu_seconds']:.1f} (first step {result['compile_cpu_seconds']:.1f})  "
          f"tempering steps {result['tempering_steps']}  "
          f"HMC acceptance {result['acceptance_rate']:.2f}")


if __name__ == "__main__":
    main()
