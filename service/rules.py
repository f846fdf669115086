"""Decision rules: what a rule tests (``When``, exactly one condition), its request shape
(``RuleIn``) and the record stored in the comparison's spec (``RuleSpec``). The public view is
service/api/responses.py ``RuleOut``; service/decisions.py evaluates the rules after every
applied chunk (docs/guide/decisions.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from modelcompare.models.config import Integer
from modelcompare.service.names import NAME_MAX_CHARS, NAME_PATTERN, STRICT_JSON
from modelcompare.service.webhooks.targets import URL_MAX_CHARS, TargetRefused, parse

# A rule's threshold is tested on the value moved k standard errors against it (service/
# decisions.py): two keeps a rule on a steady value from firing on estimator noise alone about
# 97.7% of the time per chunk; ten is past any use.
DEFAULT_STDERRS = 2.0
MAX_STDERRS = 10.0
MAX_FOR_CHUNKS = 1000

Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=NAME_MAX_CHARS)]
LogFactor = Annotated[float, Field(ge=-1e6, le=1e6, allow_inf_nan=False)]
Kind = Literal["log_bayes_factor", "window_log_bayes_factor", "posterior_probability",
               "unreliable", "best_changed"]


class Condition(BaseModel):
    model_config = {**STRICT_JSON, "frozen": True}


class BayesFactorTest(Condition):
    """log BF(model : against) = log Z(model) − log Z(against), above or below a threshold."""

    model: Name
    against: Name
    above: LogFactor | None = Field(None, description="fires while log BF − k·stderr > above")
    below: LogFactor | None = Field(None, description="fires while log BF + k·stderr < below")

    @model_validator(mode="after")
    def _one_threshold(self) -> BayesFactorTest:
        if (self.above is None) == (self.below is None):
            raise ValueError('give exactly one of "above" and "below"')
        if self.model == self.against:
            raise ValueError(f'"model" and "against" are both {self.model!r}')
        return self


class WindowTest(BayesFactorTest):
    """The log Bayes factor of the last ``rows`` rows given the earlier ones (the whole stream
    while fewer were seen)."""

    rows: Integer = Field(ge=1, description="rows of the window; at most "
                          "MODELCOMPARE_MAX_RULE_WINDOW_ROWS")


class ProbabilityTest(Condition):
    """The model's posterior probability, lowered by its error bar, above ``above``."""

    model: Name
    above: float = Field(gt=0.0, lt=1.0)


class ModelTest(Condition):
    model: Name


class BestChanged(Condition):
    """Another model leads the best one by k standard errors of their log Bayes factor."""


class When(Condition):
    """Exactly one condition."""

    log_bayes_factor: BayesFactorTest | None = None
    window_log_bayes_factor: WindowTest | None = None
    posterior_probability: ProbabilityTest | None = None
    unreliable: ModelTest | None = Field(
        None, description="fires once the model is marked unreliable (its SGHMC moves diverged)")
    best_changed: BestChanged | None = Field(
        None, description="{}: fires each time another model becomes the most probable")

    @model_validator(mode="after")
    def _exactly_one(self) -> When:
        names = list(type(self).model_fields)
        given = [name for name in names if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one condition of {', '.join(names)}; got "
                             f"{len(given)}")
        return self

    @property
    def kind(self) -> Kind:
        return next(name for name in type(self).model_fields if getattr(self, name) is not None)

    @property
    def test(self) -> Condition:
        return getattr(self, self.kind)

    def public(self) -> dict[str, Any]:
        """As given: its one key, without the unset threshold."""
        return self.model_dump(mode="json", exclude_none=True)

    def models(self) -> list[str]:
        """The models the condition names."""
        test: Any = self.test
        return [name for name in (getattr(test, "model", None), getattr(test, "against", None))
                if name is not None]


class RuleIn(Condition):
    model_config = {**STRICT_JSON, "json_schema_extra": {"examples": [{
        "name": "promote", "for_chunks": 2,
        "when": {"log_bayes_factor": {"model": "challenger", "against": "production",
                                      "above": 3.0}}}]}}
    name: Name = Field(description="unique within the comparison; letters, digits, _ . - (not "
                       "dots alone)")
    when: When
    for_chunks: Integer = Field(1, ge=1, le=MAX_FOR_CHUNKS,
                                description="consecutive chunks the condition must hold")
    stderrs: float = Field(DEFAULT_STDERRS, ge=0.0, le=MAX_STDERRS,
                           description="k: the value is tested k standard errors on the "
                           "cautious side of the threshold")
    webhook: str | None = Field(
        None, max_length=URL_MAX_CHARS,
        description="http(s) URL to POST each of the rule's events to, signed with the "
        "comparison's webhook secret; its host must resolve to addresses the operator allows")

    @field_validator("webhook")
    @classmethod
    def _webhook_url(cls, url: str | None) -> str | None:
        if url is not None:
            try:
                parse(url)
            except TargetRefused as exc:
                raise ValueError(f"webhook: {exc}") from None
        return url

    def spec(self, created_at: float) -> RuleSpec:
        return RuleSpec(name=self.name, when=self.when, for_chunks=self.for_chunks,
                        stderrs=self.stderrs, created_at=created_at, webhook=self.webhook)


class RuleSpec(BaseModel):
    """A rule as stored in the comparison's spec. Fields are added with defaults, so that
    records stored before them still read."""

    model_config = {"frozen": True}
    name: str
    when: When
    for_chunks: int
    stderrs: float
    created_at: float
    webhook: str | None = None

    def public(self) -> dict[str, Any]:
        """The public view's fields (service/api/rule_responses.py ``RuleOut``)."""
        return {**self.model_dump(mode="json"), "when": self.when.public()}


def unknown_models(rule: RuleIn | RuleSpec, models: list[str]) -> list[str]:
    """The models ``rule`` names that are not among ``models``."""
    return [name for name in rule.when.models() if name not in models]
