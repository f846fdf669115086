"""Bayesian multinomial logistic regression: p(y = k | x) = softmax_k(W x + c), K ≥ 2 classes.

All weights W (K, dim) and biases c (K,) have independent N(0, 1) priors. θ holds one block of
``dim + 1`` numbers per class, (w_k, c_k), so θ.reshape(M, K, dim + 1) multiplies Φ = [x, 1].
``dim=0`` is the intercept-only model: class frequencies, no inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from modelcompare.models.base import Model, Prediction
from modelcompare.models.config import MAX_CLASSES, FamilyConfig, Integer, input_dim
from modelcompare.models.gaussian_linear import design, regression_inputs
from modelcompare.models.target import Target, labels
from modelcompare.models.weighting import (
    WeightedRows,
    joined_rows,
    normalized_weights,
    stepwise_rows,
)


class LogisticRegressionConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    classes: Integer = Field(2, ge=2, le=MAX_CLASSES, description="K: labels are 0, 1, …, K − 1")


class LogisticRegression(Model):
    family: ClassVar[str] = "logistic_regression"
    Config: ClassVar[type[FamilyConfig]] = LogisticRegressionConfig

    def __init__(self, dim: int, classes: int = 2) -> None:
        config = LogisticRegressionConfig.checked(dim=dim, classes=classes)
        self.input_dim = config.dim
        self.classes = config.classes
        self.param_dim = config.classes * (config.dim + 1)
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "classes": self.classes}

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        super().validate_data(x, y)
        assert y is not None
        rows = regression_inputs(self.input_dim, x, y).shape[0]
        if y.shape != (rows,):
            raise ValueError(
                f"{self.family} needs y of shape ({rows},), got shape {tuple(y.shape)}"
            )

    def target(self) -> Target:
        return labels(self.classes)

    def _logits(self, theta: Tensor, phi: Tensor) -> Tensor:
        """(M, D), (R, dim + 1) -> (M, K, R), one GEMM over all particles and classes."""
        m = theta.shape[0]
        return (theta.reshape(m * self.classes, -1) @ phi.T).reshape(m, self.classes, -1)

    def log_prior(self, theta: Tensor) -> Tensor:
        return -0.5 * (theta**2).sum(-1) - 0.5 * self.param_dim * math.log(2 * math.pi)

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        return -theta

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        logits = self._logits(theta, design(x))
        labels = y.long().expand(theta.shape[0], 1, -1)
        return logits.gather(1, labels)[:, 0] - torch.logsumexp(logits, dim=1)

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float | Tensor = 1.0
    ) -> Tensor:
        """``row_weight`` is one weight, or (R, 1) weights of the rows (``_of_parts``)."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        weighted_phi = phi * row_weight
        return self._weighted_gradient(
            self._probabilities(theta, phi), weighted_phi, self._observed(y.long(), weighted_phi)
        )

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        labels = y.long()
        log_lik, probabilities = self._log_likelihood_and_probabilities(theta, phi, labels)
        weighted_phi = phi * row_weight
        grad = self._weighted_gradient(
            probabilities, weighted_phi, self._observed(labels, weighted_phi)
        )
        return log_lik.sum(-1) * row_weight, grad

    def log_likelihood_and_grad_of_parts(
        self, theta: Tensor, parts: Sequence[WeightedRows]
    ) -> tuple[Tensor, Tensor]:
        """One pass over every part's rows, each row weighted by its part's weight."""
        return self.weighted_sum(parts).value_and_grad(theta)

    def grad_log_likelihood_of_parts(self, theta: Tensor, parts: Sequence[WeightedRows]) -> Tensor:
        return self.weighted_sum(parts).grad(theta)

    def weighted_sum(self, parts: Sequence[WeightedRows]) -> SoftmaxRows:
        x, y, weights = joined_rows(parts)
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        labels = y.long()
        weighted_phi = column_major(phi * weights[:, None])
        return SoftmaxRows(
            self, phi, labels, weights, weighted_phi, self._observed(labels, weighted_phi)
        )

    def stepwise_sums(
        self, fixed: Sequence[WeightedRows], streams: Sequence[WeightedRows], steps: int
    ) -> list[SoftmaxRows]:
        """Every slice's rows joined after ``fixed`` in one (steps, R, ·) block: one design and
        one label term for the whole trajectory."""
        x, y, weights = stepwise_rows(fixed, streams, steps)
        assert y is not None
        phi = design(x if self.input_dim else y.new_zeros(*y.shape, 0))
        labels = y.long()
        weighted_phi = column_major(phi * weights[..., None])
        observed = torch.zeros(
            steps, self.classes, phi.shape[2], dtype=phi.dtype, device=phi.device
        ).scatter_add_(1, labels[..., None].expand(-1, -1, phi.shape[2]), weighted_phi)
        return [
            SoftmaxRows(self, phi[i], labels[i], weights[i], weighted_phi[i], observed[i])
            for i in range(steps)
        ]

    def row_grad_log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        probabilities = self._log_likelihood_and_probabilities(theta, phi, y.long())[1]
        one_hot = F.one_hot(y.long(), self.classes).T.to(phi.dtype)  # (K, R)
        resid = (one_hot - probabilities).transpose(1, 2).contiguous()  # (M, R, K)
        return (resid[..., None] * phi[:, None, :]).flatten(2)

    def row_grad_log_likelihood_times(
        self,
        theta: Tensor,
        x: Tensor | None,
        y: Tensor | None,
        matrix: Tensor,
        anchor: Tensor | None = None,
    ) -> Tensor:
        """Row r's gradient is (1[y_r = k] − p_mkr) Φ_r in class block k, so the difference from
        the anchor's is (p_akr − p_mkr) Φ_r and its product with A (D, C) is
        Σ_k (p_akr − p_mkr) Φ_r A_k, A_k the rows of class block k: the (K, R, C) products
        Φ_r A_k once for all particles, then one K-term sum per particle and row instead of the
        (M, R, D) gradients times A."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        if anchor is None:
            one_hot = F.one_hot(y.long(), self.classes).T.to(phi.dtype)  # (K, R)
            resid = one_hot - self._probabilities(theta, phi)  # (M, K, R)
        else:
            both = self._probabilities(torch.cat([theta, anchor[None]]), phi)
            resid = both[-1:] - both[:-1]
        blocks = phi @ matrix.reshape(self.classes, phi.shape[1], -1)  # (K, R, C)
        products = torch.bmm(  # (R, M, C): batched over rows, contiguous operands are faster
            resid.permute(2, 0, 1).contiguous(), blocks.transpose(0, 1).contiguous()
        )
        return products.transpose(0, 1).contiguous()

    def _probabilities(self, theta: Tensor, phi: Tensor) -> Tensor:
        """The class probabilities p_mkr (M, K, R)."""
        exp = self._shifted_logits(theta, phi).exp_()
        return exp.div_(exp.sum(1, keepdim=True))

    def _shifted_logits(self, theta: Tensor, phi: Tensor) -> Tensor:
        """Logits less their largest class (M, K, R): exp of them cannot overflow."""
        logits = self._logits(theta, phi)
        return logits.sub_(logits.amax(1, keepdim=True))

    def _log_likelihood_and_probabilities(
        self, theta: Tensor, phi: Tensor, labels: Tensor
    ) -> tuple[Tensor, Tensor]:
        """log p(y_r | Φ_r, θ_m) (M, R) and the class probabilities p_mkr (M, K, R): log-softmax
        by hand, one exp serving value and gradient (faster than torch.log_softmax over a middle
        dimension on CPU). ``labels`` are the y_r as integers."""
        shifted = self._shifted_logits(theta, phi)
        observed = shifted.gather(1, labels.expand(theta.shape[0], 1, -1))[:, 0]
        exp = shifted.exp_()
        norm = exp.sum(1, keepdim=True)
        return observed - norm.log()[:, 0], exp.div_(norm)

    def _observed(self, labels: Tensor, weighted_phi: Tensor) -> Tensor:
        """The label term Σ_r w_r 1[y_r = k] Φ_r (K, dim + 1) of the gradient, from the rows'
        design scaled by their weights: one sum shared by every particle."""
        return torch.zeros(
            self.classes,
            weighted_phi.shape[1],
            dtype=weighted_phi.dtype,
            device=weighted_phi.device,
        ).index_add_(0, labels, weighted_phi)

    def _weighted_gradient(
        self, probabilities: Tensor, weighted_phi: Tensor, observed: Tensor
    ) -> Tensor:
        """Σ_r w_r (1[y_r = k] − p_mkr) Φ_r per particle (M, D) (PRML eq. 4.109) from the label
        term (``_observed``): the (M, K, R) residuals are never formed."""
        m, columns = probabilities.shape[0], weighted_phi.shape[1]
        # Φᵀ (columns, R) times the transposed probabilities, Φ column-major: the layout MKL's
        # GEMM runs fastest for these shapes (benchmarks/README.md, throughput.py).
        expected = (weighted_phi.T @ probabilities.reshape(m * self.classes, -1).T).T
        return (observed - expected.reshape(m, self.classes, columns)).reshape(m, -1)

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return torch.randn(
            num, self.param_dim, generator=generator, dtype=torch.float64, device=generator.device
        )

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Class probabilities (R, K) averaged over the weighted particles."""
        x = regression_inputs(self.input_dim, x, None)
        probs = torch.softmax(self._logits(theta, design(x)), dim=1)  # (M, K, R)
        weights = normalized_weights(log_weights)
        mixed = weights @ probs.reshape(theta.shape[0], -1)
        return Prediction(probabilities=mixed.reshape(self.classes, -1).T)


def column_major(rows: Tensor) -> Tensor:
    """``rows`` (..., R, C) with each column contiguous (the same values)."""
    return rows.transpose(-1, -2).contiguous().transpose(-1, -2)


class SoftmaxRows(NamedTuple):
    """Weighted rows of a softmax regression prepared for many θ (``Model.weighted_sum``): the
    design Φ, the labels, the row weights, Φ scaled by them and the gradient's label term."""

    model: LogisticRegression
    phi: Tensor  # (R, dim + 1)
    labels: Tensor  # (R,) int64
    weights: Tensor  # (R,)
    weighted_phi: Tensor  # (R, dim + 1)
    observed: Tensor  # (K, dim + 1)

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        model = self.model
        log_lik, probabilities = model._log_likelihood_and_probabilities(
            theta, self.phi, self.labels
        )
        grad = model._weighted_gradient(probabilities, self.weighted_phi, self.observed)
        return log_lik @ self.weights, grad

    def grad(self, theta: Tensor) -> Tensor:
        probabilities = self.model._probabilities(theta, self.phi)
        return self.model._weighted_gradient(probabilities, self.weighted_phi, self.observed)
