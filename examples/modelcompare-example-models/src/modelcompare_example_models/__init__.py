"""Two model families for modelcompare, registered as a plugin (entry-point group
``modelcompare.models``, declared in this package's pyproject.toml): Student-t robust regression
and negative binomial regression."""

from modelcompare_example_models.negative_binomial import NegativeBinomialRegression
from modelcompare_example_models.student_t import StudentTRegression

__all__ = ["NegativeBinomialRegression", "StudentTRegression"]
