"""The values a model's target y may take, as data: the service publishes it with each model, so
a client checks a file's rows before sending them without having the model's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor


@dataclass(frozen=True)
class Target:
    """``real``: any finite number; ``count``: a non-negative integer; ``label``: a class label,
    an integer in [0, ``classes``)."""

    kind: Literal["real", "count", "label"]
    classes: int | None = None

    def refused(self, y: Tensor) -> Tensor:
        """Which values of ``y`` lie outside the support: a boolean tensor shaped like ``y``."""
        outside = ~torch.isfinite(y)
        if self.kind != "real":
            outside |= (y != y.round()) | (y < 0)
        if self.classes is not None:
            outside |= y >= self.classes
        return outside

    def requirement(self) -> str:
        """What a refusal says the model needs, e.g. "integer labels in [0, 3)"."""
        if self.kind == "label":
            return f"integer labels in [0, {self.classes})"
        if self.kind == "count":
            return "y to be non-negative integers"
        return "finite y"

    def public(self) -> dict[str, Any]:
        return {"kind": self.kind, "classes": self.classes}

    @classmethod
    def of(cls, public: dict[str, Any]) -> Target:
        return cls(kind=public["kind"], classes=public.get("classes"))


REAL = Target("real")
COUNT = Target("count")


def labels(classes: int) -> Target:
    return Target("label", classes)
