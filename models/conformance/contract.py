"""Checks of the contract's form: construction and config, shapes and dtypes, determinism, the
independence of particles and rows, and the fields of predict."""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.models.base import Model, ModelConfigError, Prediction
from modelcompare.models.config import FamilyConfig
from modelcompare.models.conformance.findings import Violation, close

F64 = torch.float64
FIELDS = ("mean", "variance", "probabilities", "log_density")
REQUIRED = "config, log_prior, log_likelihood, sample_prior and predict"
FLOAT64 = (
    "the contract is float64 throughout: create tensors with dtype=torch.float64 or from θ "
    "(theta.new_zeros, torch.zeros_like)"
)
# A log-weight whose exp is 0 in float64 (below log of the smallest subnormal, about −745):
# a particle with it must not count in predict.
NO_WEIGHT = -1000.0


def build(model_class: object, config: dict[str, Any]) -> Model:
    """The model ``model_class(**config)``, or a Violation that says why it cannot be built."""
    if not (isinstance(model_class, type) and issubclass(model_class, Model)):
        raise Violation(
            f"{model_class!r} is not a subclass of modelcompare.models.Model: subclass it and "
            f"implement {REQUIRED}"
        )
    missing = sorted(getattr(model_class, "__abstractmethods__", ()))
    if missing:
        raise Violation(
            f"{model_class.__name__} does not implement {', '.join(missing)}: a model "
            f"implements {REQUIRED}"
        )
    try:
        return model_class(**config)
    except (ModelConfigError, TypeError, ValueError) as exc:
        raise Violation(
            f"{model_class.__name__}(**{config}) failed: {exc}. Give the constructor's keyword "
            "arguments as the config (--config '{\"dim\": 2}')"
        ) from None


def check_attributes(model: Model) -> str:
    """The class attributes and dimensions the estimators and the service read."""
    name = type(model).__name__
    family = getattr(type(model), "family", None)
    if not isinstance(family, str) or not family:
        raise Violation(f"{name} has no family name: set the class attribute family = 'my_family'")
    record = getattr(type(model), "Config", None)
    if not (isinstance(record, type) and issubclass(record, FamilyConfig)):
        raise Violation(
            f"{name}.Config is not a settings record: declare a "
            "modelcompare.models.config.FamilyConfig "
            "subclass with one field per constructor argument, and set Config to it"
        )
    for attribute, kind, least in (("param_dim", int, 1), ("input_dim", int, 0)):
        value = getattr(model, attribute, None)
        if type(value) is not kind or value < least:
            raise Violation(
                f"{name}.{attribute} is {value!r}: set it in the constructor to a whole number "
                f"of at least {least}"
            )
    if type(getattr(model, "has_target", None)) is not bool:
        raise Violation(f"{name}.has_target must be True (rows have a y) or False (x only)")
    target = "a target y" if model.has_target else "no target"
    return (
        f"family {family!r}: {model.param_dim} parameters, {model.input_dim} inputs, {target}"
    )


def check_config_round_trip(model: Model) -> str:
    """config() is JSON, its Config record accepts it unchanged, and it rebuilds the model."""
    config = model.config()
    if not isinstance(config, dict):
        raise Violation(f"config() returned {type(config).__name__}; return a dict of the "
                        "constructor's keyword arguments")
    try:
        as_json = json.loads(json.dumps(config))
    except (TypeError, ValueError) as exc:
        raise Violation(f"config() is not JSON ({exc}): the service stores it as JSON and a "
                        "saved state names it; return numbers, strings, lists and dicts") from None
    if as_json != config:
        raise Violation(f"config() changes in JSON ({config} becomes {as_json}): return lists, "
                        "not tuples, and string keys")
    try:
        checked = type(model).Config.checked(**config).model_dump()
    except ModelConfigError as exc:
        raise Violation(f"the Config record refuses config() itself: {exc}") from None
    if checked != config:
        raise Violation(f"Config(**config()) reads {checked}, config() returns {config}: make "
                        "config() return every field of Config, as the record holds it")
    rebuilt = type(model)(**config).config()
    if rebuilt != config:
        raise Violation(f"{type(model).__name__}(**config()).config() is {rebuilt}, not "
                        f"{config}: config() must return the arguments that rebuild the model")
    return f"config() = {json.dumps(config, sort_keys=True)} rebuilds the model"


def expect_tensor(what: str, value: object, shape: tuple[int, ...], hint: str = "") -> Tensor:
    """``value`` as a finite float64 tensor of ``shape``, or a Violation saying what differs."""
    if not isinstance(value, Tensor):
        raise Violation(f"{what} returned {type(value).__name__}, not a torch.Tensor")
    if tuple(value.shape) != shape:
        raise Violation(f"{what} has shape {tuple(value.shape)}; expected {shape}{hint}")
    if value.dtype != F64:
        raise Violation(f"{what} is {value.dtype}: {FLOAT64}")
    finite = torch.isfinite(value)
    if not bool(finite.all()):
        index = tuple((~finite).nonzero()[0].tolist())
        raise Violation(
            f"{what} is {value[index].item()} at index {index}: compute on the log scale "
            "(logsumexp, log1p, logsigmoid) so that it stays finite wherever the model has "
            "support"
        )
    return value


def check_prior_shapes(model: Model, seed: int) -> str:
    """sample_prior (n, D) float64, reproducible from its generator; log_prior (n,)."""
    draws = model.sample_prior(8, torch.Generator().manual_seed(seed))
    expect_tensor("sample_prior(8, generator)", draws, (8, model.param_dim),
                  ": one row of param_dim unconstrained numbers per draw")
    again = model.sample_prior(8, torch.Generator().manual_seed(seed))
    if not torch.equal(draws, again):
        raise Violation(
            "sample_prior gave different draws from two generators seeded alike: draw only from "
            "the generator it is given (torch.randn(..., generator=generator)), never from "
            "torch's global random state, or a replayed stream will not reproduce its state"
        )
    expect_tensor("log_prior(θ)", model.log_prior(draws), (8,), ": one log density per row of θ")
    return "sample_prior (8, D) float64 and reproducible; log_prior (8,)"


def check_likelihood_shapes(model: Model, rows: Rows, generator: torch.Generator) -> str:
    """log_likelihood (M, R) float64 finite; each particle's and each row's value its own."""
    theta = model.sample_prior(4, generator)
    count = rows.count
    values = expect_tensor(
        "log_likelihood(θ, x, y)", model.log_likelihood(theta, rows.x, rows.y), (4, count),
        ": (particles, rows), one log p(y_r | x_r, θ_m) per particle and row, not summed")
    magnitude = values.abs()
    alone = model.log_likelihood(theta[1:2], rows.x, rows.y)
    if not close(alone, values[1:2], magnitude[1:2]):
        raise Violation("log_likelihood of one particle differs from its row in a batch: "
                        "particles must not interact (no sums or means over dim 0 of θ)")
    half = rows.slice(0, count // 2)
    first = model.log_likelihood(theta, half.x, half.y)
    if not close(first, values[:, : count // 2], magnitude[:, : count // 2]):
        raise Violation("log_likelihood of the first rows differs from the same rows within "
                        "more: rows must not interact (no sums or means over the rows of x, y)")
    return f"log_likelihood (4, {count}) float64; particles and rows independent"


def check_predict(model: Model, rows: Rows, generator: torch.Generator) -> str:
    """A Prediction with one value (or one row of class probabilities) per query row, averaged
    over the particles with their weights."""
    theta = model.sample_prior(4, generator)
    log_weights = torch.randn(4, generator=generator, dtype=F64)
    query = rows.x
    count = 1 if query is None else query.shape[0]
    prediction = fields(model.predict(theta, log_weights, query), count)
    shifted = fields(model.predict(theta, log_weights + 7.0, query), count)
    concentrated = torch.full_like(log_weights, NO_WEIGHT)
    concentrated[0] = 0.0
    alone = fields(model.predict(theta[:1], log_weights[:1], query), count)
    on_first = fields(model.predict(theta, concentrated, query), count)
    if any(set(other) != set(prediction) for other in (shifted, alone, on_first)):
        raise Violation("predict fills different fields for different particles or weights: "
                        "fill the same ones on every call")
    for name, value in prediction.items():
        if not close(shifted[name], value, value.abs()):
            raise Violation(f"predict's {name} changes when every log-weight grows by 7: "
                            "normalise the weights "
                            "(modelcompare.models.weighting.normalized_weights)")
        if not close(on_first[name], alone[name], alone[name].abs()):
            raise Violation(f"predict's {name} with all weight on particle 0 differs from "
                            "predict on particle 0 alone: average over particles with weights "
                            "exp(log_weights), normalised")
    return f"predict gives {', '.join(prediction)} for {count} rows, weighted by log_weights"


def fields(prediction: object, count: int) -> dict[str, Tensor]:
    """The set fields of a Prediction for ``count`` query rows, checked."""
    if not isinstance(prediction, Prediction):
        raise Violation(f"predict returned {type(prediction).__name__}; return a "
                        "modelcompare.models.Prediction")
    found = {name: getattr(prediction, name) for name in FIELDS
             if getattr(prediction, name) is not None}
    if not found:
        raise Violation("predict returned an empty Prediction: fill mean and variance "
                        "(regression), probabilities (classes) or log_density (a density of x)")
    rows = "one per query row" if count > 1 else "one row when x is None"
    for name, value in found.items():
        what = f"predict(θ, log_weights, x).{name}"
        if name == "probabilities":
            classes = value.shape[-1] if isinstance(value, Tensor) and value.ndim == 2 else 2
            expect_tensor(what, value, (count, classes),
                          f": (query rows, classes), {rows}, averaged over particles")
            if classes < 2 or bool((value < 0).any()) or not close(
                    value.sum(-1), torch.ones(count, dtype=F64), 1.0):
                raise Violation(f"{what} rows must be probabilities of two classes or more, "
                                "non-negative and summing to 1")
        else:
            expect_tensor(what, value, (count,), f": {rows}, averaged over particles")
    if "variance" in found and bool((found["variance"] < 0).any()):
        raise Violation("predict's variance is negative: it is the predictive variance, "
                        "noise plus the spread of the particles' means")
    return found
