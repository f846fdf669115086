"""How many parameters the estimators are checked to serve, and the warning past that.

The largest models whose evidence the benchmarks check against exact or reference values with
default settings have 44 parameters (softmax regression, 10 inputs × 4 classes, in
``benchmarks/calibration.py``; linear regression up to D = 41 in ``benchmarks/dimension.py``).
Past that, ``benchmarks/dimension.py`` finds linear regression calibrated up to D = 161 and
softmax and Poisson regressions of about 100 parameters within 2 stderr on 10 and 9 of 10 data
sets (RMS z 1.10 and 1.25; docs/guide/models.md, "Models with many parameters"), but those are
three families with their data drawn from the model, so a larger model's evidence is reported
with a warning, not refused.
"""

from __future__ import annotations

VALIDATED_PARAMETERS = 44
CLOSED_FORM = frozenset({"exact"})  # conjugate updates: exact at any D


def dimension_warning(method: str, param_dim: int) -> str | None:
    """Why ``method``'s evidence for a model of ``param_dim`` parameters needs caution, or
    None where it is within what the benchmark checks."""
    if method in CLOSED_FORM or param_dim <= VALIDATED_PARAMETERS:
        return None
    return (
        f"{param_dim} parameters, more than the {VALIDATED_PARAMETERS} up to which the "
        f"{method} evidence is checked against exact values; larger models can be off by more "
        "than the standard error (docs/guide/models.md, 'Models with many parameters')"
    )
