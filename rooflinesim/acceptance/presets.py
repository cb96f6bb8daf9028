"""Published acceptance for common pairings and methods, shipped as `presets.yaml` with the conditions it was measured
under and its source.

Every preset states what changes acceptance by ~2x for the same drafter: method, target, draft, task, chain or tree,
k, temperature and engine, and exactly one of: E at k (`expected_tokens`, what papers call tau or mean accepted
tokens, the bonus token included), E at each k = 1..K measured in separate runs (`expected_tokens_by_k`), or
conditional per-position rates (`per_position`). A preset missing any condition is rejected by the schema.

What is published is stored as published. When used:

* per-position rates are used as they are;
* E at k = 1..K becomes per-position rates through E(k) - E(k-1) = a_1 ... a_k (with a warning: separate runs,
  rounded numbers);
* one E at k becomes the i.i.d. alpha with that E at that k, with a warning naming the conditions; for a *tree* the
  warning says that a tree's E at depth k is more than any chain of k drafts with the same per-token acceptance
  gets, so the chain alpha is an optimistic stand-in.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..specs.base import format_validation_error
from .closed_form import alpha_from_expected_tokens_iid, expected_tokens_per_position
from .measured import AcceptanceSourceError, MeasuredAcceptance, from_mean_length

PRESET_FILE = "presets.yaml"
METHODS = ("draft-model", "eagle", "eagle2", "eagle3", "medusa", "mtp", "ngram")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class PresetSource(_Strict):
    title: str = Field(min_length=3)
    url: str = Field(pattern=r"^https://\S+$")
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,40}$")
    confidence: Literal["primary", "secondary", "low"]
    note: str | None = None


class AcceptancePreset(_Strict):
    """One published measurement with its conditions. Conditions have no defaults: leaving one out is an error."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]*$")
    method: Literal[METHODS]
    target: str = Field(min_length=2)
    draft: str = Field(min_length=2)
    task: str = Field(min_length=2)
    shape: Literal["chain", "tree"]
    k: int = Field(ge=1, le=64)  # chain: drafts per step; tree: its depth
    temperature: float = Field(ge=0.0)
    engine: str = Field(min_length=2)
    expected_tokens: float | None = None
    expected_tokens_by_k: dict[int, float] | None = Field(default=None, strict=False)
    per_position: tuple[float, ...] | None = Field(default=None, strict=False)
    #: the tree a tree preset was measured with, where known: a name of `trees.NAMED_TREES` or SGLang's
    #: steps,topk,num_draft_tokens (a measured accept length is then fitted on it, `scenario.drafting`)
    tree: str | None = None
    source: PresetSource

    @model_validator(mode="after")
    def _one_consistent_measurement(self) -> "AcceptancePreset":
        given = [f for f in ("expected_tokens", "expected_tokens_by_k", "per_position") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of expected_tokens, expected_tokens_by_k, per_position, got "
                             f"{', '.join(given) or 'none'}")
        if self.expected_tokens is not None and not 1.0 <= self.expected_tokens <= self.k + 1:
            raise ValueError(f"expected_tokens {self.expected_tokens} must lie in [1, k + 1] = [1, {self.k + 1}]")
        if self.per_position is not None:
            if len(self.per_position) != self.k or not all(0.0 <= a <= 1.0 for a in self.per_position):
                raise ValueError(f"per_position needs k = {self.k} rates in [0, 1]")
        if self.expected_tokens_by_k is not None:
            if sorted(self.expected_tokens_by_k) != list(range(1, self.k + 1)):
                raise ValueError(f"expected_tokens_by_k needs k = 1..{self.k}")
            reach = np.diff([1.0] + [self.expected_tokens_by_k[i] for i in range(1, self.k + 1)])
            if np.any(reach < -1e-9) or np.any(reach > 1 + 1e-9) or np.any(np.diff(reach) > 0.005 + 1e-9):
                raise ValueError("expected_tokens_by_k must grow by a non-increasing step of at most 1 per draft (one "
                                 "chain's E(k) - E(k-1) = a_1...a_k), within rounding to 2 decimals")
        if self.shape == "tree" and self.per_position is not None:
            raise ValueError("a tree has no chain per-position rates: store its expected_tokens at its depth k")
        if self.tree is not None:
            from .trees import parse_tree

            if self.shape != "tree":
                raise ValueError("only a tree preset names its tree")
            depth = parse_tree(self.tree).steps  # ValueError for an unknown tree
            if depth != self.k:
                raise ValueError(f"tree {self.tree} has depth {depth}, not k = {self.k}")
        return self

    @property
    def conditions(self) -> dict:
        conditions = {"method": self.method, "target": self.target, "draft": self.draft, "task": self.task,
                      "shape": self.shape, "k": self.k, "temperature": self.temperature, "engine": self.engine,
                      "source": self.source.url, "confidence": self.source.confidence}
        return conditions if self.tree is None else {**conditions, "tree": self.tree}

    def describe_conditions(self) -> str:
        return (f"{self.method} {self.draft} -> {self.target}, {self.task}, {self.shape} k = {self.k}, "
                f"T = {self.temperature:g}, {self.engine}; {self.source.title}, {self.source.url} "
                f"({self.source.confidence}{'; ' + self.source.note if self.source.note else ''})")

    def per_position_rates(self) -> tuple[float, ...] | None:
        """Conditional rates: as published, or from E at k = 1..K (a_k = (E_k - E_{k-1}) / (E_{k-1} - E_{k-2}))."""
        if self.per_position is not None:
            return self.per_position
        if self.expected_tokens_by_k is None:
            return None
        reach = np.diff([1.0] + [self.expected_tokens_by_k[i] for i in range(1, self.k + 1)])
        reach = np.minimum.accumulate(np.clip(reach, 0.0, 1.0))  # rounding can make a step grow by 0.01
        previous = np.concatenate([[1.0], reach[:-1]])
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = np.where(previous > 0, reach / previous, 0.0)
        return tuple(float(r) for r in np.clip(rates, 0.0, 1.0))

    def to_measured(self) -> MeasuredAcceptance:
        where = f"preset {self.name}"
        said = f"{where}: published for {self.describe_conditions()}"
        rates = self.per_position_rates()
        if rates is not None:
            warnings = [said]
            if self.expected_tokens_by_k is not None:
                warnings.append(f"{where}: per-position rates derived from E at k = 1..{self.k} measured in separate "
                                "runs and rounded to 2 decimals, so later positions are approximate")
            expected = float(expected_tokens_per_position(np.asarray(rates)))
            return MeasuredAcceptance(
                engine=where, source=where, k=self.k, expected_tokens=expected,
                iid_alpha=float(alpha_from_expected_tokens_iid(expected, self.k)), per_position=rates,
                warnings=tuple(warnings), conditions=self.conditions)
        warnings = [said]
        if self.shape == "tree":
            warnings.append(f"{where}: a tree's accepted length at depth {self.k} exceeds what a chain of {self.k} "
                            "drafts with the same per-token acceptance commits; the i.i.d. chain alpha below is an "
                            "optimistic stand-in, and the tree's wider verify step is not priced (pass --tree to price a tree)")
        return from_mean_length(where, where, self.expected_tokens, self.k,
                                warnings=warnings, conditions=self.conditions)


class PresetLibrary(_Strict):
    schema_version: Literal[1]
    presets: tuple[AcceptancePreset, ...] = Field(strict=False)

    @model_validator(mode="after")
    def _unique_names(self) -> "PresetLibrary":
        names = [p.name for p in self.presets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate preset names: {', '.join(duplicates)}")
        return self


def load_preset_library(text: str | None = None, where: str = PRESET_FILE) -> PresetLibrary:
    """The shipped library (or `text` in the same format), validated; a bad file is one line naming the field."""
    if text is None:
        text = resources.files(__package__).joinpath(PRESET_FILE).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AcceptanceSourceError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return PresetLibrary.model_validate(data)
    except ValidationError as exc:
        raise AcceptanceSourceError(format_validation_error(where, exc)) from None


@lru_cache(maxsize=1)
def _shipped() -> PresetLibrary:
    return load_preset_library()


def list_presets() -> tuple[AcceptancePreset, ...]:
    return _shipped().presets


def get_preset(name: str) -> AcceptancePreset:
    for preset in list_presets():
        if preset.name == name:
            return preset
    raise AcceptanceSourceError(f"unknown acceptance preset {name!r}; see 'rooflinesim list acceptance'")


__all__ = ["AcceptancePreset", "PresetSource", "PresetLibrary", "load_preset_library", "list_presets", "get_preset",
           "METHODS"]
