"""A family a plugin could provide, for the registry's tests: a linear regression under its own
name."""

from __future__ import annotations

from modelcompare.models import LinearRegression


class RenamedLinearRegression(LinearRegression):
    family = "renamed_linear_regression"
