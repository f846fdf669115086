"""Model families by name: the built-in ones and those that installed packages declare as plugins.

A plugin package declares each family in its pyproject.toml under the entry-point group
``modelcompare.models``, the entry point's name being the family's name::

    [project.entry-points."modelcompare.models"]
    student_t = "my_models.student_t:StudentT"

Every process loads the same group: the library, the API, the workers and ``check-model``. A
family is known with the package (distribution) that provides it and that package's version;
a comparison records both, and a process continues a comparison only with a version that can
(``Family.refuses``): the same major version, not older than the recorded one.
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version
from typing import Any

from packaging.version import InvalidVersion, Version

from modelcompare.models.base import Model, ModelConfigError

ENTRY_POINT_GROUP = "modelcompare.models"
BUILT_IN_PACKAGE = "modelcompare"

log = logging.getLogger("modelcompare.models")


class FamilyUnavailable(ModelConfigError):
    """This process lacks a model family a comparison uses, or has a version that cannot
    continue it."""


@dataclass(frozen=True)
class Family:
    """A model family as this process has it: the class and the package that provides it."""

    name: str
    model: type[Model]
    package: str
    version: str

    def refuses(self, package: str | None, recorded: str | None) -> str | None:
        """Why this family cannot continue a comparison that recorded ``package`` at version
        ``recorded``, or None when it can. Records without a package (made before packages
        were recorded) are continued by any version."""
        if package is None or recorded is None:
            return None
        if package != self.package:
            return (f"family {self.name!r} comes from package {package} in this comparison but "
                    f"from {self.package} here")
        try:
            have, need = Version(self.version), Version(recorded)
        except InvalidVersion:
            return None if self.version == recorded else (
                f"family {self.name!r} needs {package} {recorded}; this process has "
                f"{self.version}")
        if have.major != need.major or have < need:
            return (f"family {self.name!r} needs {package} {recorded} or a later "
                    f"{need.major}.x; this process has {self.version}")
        return None

    def public(self) -> dict[str, Any]:
        """What ``GET /v1/families`` says of it."""
        # the class's docstring, else its module's: the first paragraph
        module = sys.modules.get(self.model.__module__)
        doc = (self.model.__doc__ or getattr(module, "__doc__", None) or "").strip()
        doc = doc.split("\n\n")[0]
        return {"family": self.name, "package": self.package, "version": self.version,
                "description": " ".join(doc.split()),
                "config_schema": self.model.Config.model_json_schema()}


@dataclass(frozen=True)
class Families:
    """The families this process can build, and the plugins that failed to load (name →
    why), which are logged once and left out."""

    known: dict[str, Family]
    broken: dict[str, str]

    def get(self, name: str) -> Family:
        try:
            return self.known[name]
        except KeyError:
            why = self.broken.get(name)
            detail = f" (its plugin failed to load: {why})" if why else ""
            raise FamilyUnavailable(
                f"unknown model family {name!r}{detail}; known: {', '.join(sorted(self.known))}"
            ) from None


def built_in() -> list[type[Model]]:
    from modelcompare.models.beta_bernoulli import BetaBernoulli
    from modelcompare.models.gamma_poisson import GammaPoisson
    from modelcompare.models.gaussian_mixture import GaussianMixture
    from modelcompare.models.linear_regression import LinearRegression
    from modelcompare.models.linear_regression_unknown_noise import LinearRegressionUnknownNoise
    from modelcompare.models.logistic_regression import LogisticRegression
    from modelcompare.models.poisson_regression import PoissonRegression

    return [LinearRegression, LinearRegressionUnknownNoise, LogisticRegression, PoissonRegression,
            GaussianMixture, BetaBernoulli, GammaPoisson]


def collect(plugins: list[EntryPoint]) -> Families:
    """The built-in families, then each plugin's; a plugin that fails to load, is not a
    ``Model`` class, names another family than its entry point, or reuses a name, is broken."""
    try:
        own = version(BUILT_IN_PACKAGE)
    except PackageNotFoundError:  # a source checkout run without installing it
        own = "0+unknown"
    known = {cls.family: Family(cls.family, cls, BUILT_IN_PACKAGE, own) for cls in built_in()}
    broken: dict[str, str] = {}
    for point in plugins:
        package = point.dist.name if point.dist is not None else point.module.split(".")[0]
        try:
            loaded = point.load()
        except Exception as exc:  # a plugin's import error must not stop this process
            broken[point.name] = f"{package}: {point.value} failed to import: " \
                                 f"{type(exc).__name__}: {exc}"
            continue
        if not (isinstance(loaded, type) and issubclass(loaded, Model)):
            broken[point.name] = f"{package}: {point.value} is not a Model subclass"
        elif getattr(loaded, "family", None) != point.name:
            broken[point.name] = (f"{package}: {point.value}.family is "
                                  f"{getattr(loaded, 'family', None)!r}, not the entry point's "
                                  f"name {point.name!r}")
        elif point.name in known:
            broken[point.name] = (f"{package}: family {point.name!r} is already provided by "
                                  f"{known[point.name].package}")
        else:
            release = point.dist.version if point.dist is not None else "0+unknown"
            known[point.name] = Family(point.name, loaded, package, release)
    for name, why in broken.items():
        log.warning("model plugin %r left out: %s", name, why)
    return Families(known, broken)


@functools.cache
def families() -> Families:
    """This process's families, loaded once (plugins installed later need a restart)."""
    return collect(list(entry_points(group=ENTRY_POINT_GROUP)))


def build_model(family: str, **config: object) -> Model:
    """Construct a model by family name; ``ModelConfigError`` on an unknown family (as
    ``FamilyUnavailable``) or config."""
    cls = families().get(family).model
    return cls(**cls.Config.checked(**config).model_dump())
