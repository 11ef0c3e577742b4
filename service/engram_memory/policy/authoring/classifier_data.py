"""Content classifiers in policy data (issue 22 item 1): the YAML model and its compiled form.

A tenant, and a workspace, list named classifiers; a workspace runs the tenant's and its own
(docs/compliance/classifiers.md). Each is exactly one of a term list, a regular expression
(held to the never-store safety rules, contract/policy_regex.py) or a validated detector;
`kinds` scopes it to component kinds (default: every kind). The service runs them
(contract/classifiers.py) and policy sees only the names that matched.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import phonenumbers
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from engram_memory.contract.policy_regex import MAX_REGEX_CHARS, checked_regex

ClassifierKind = Literal["primary", "decision", "evidence", "context", "citations"]
DetectorName = Literal["iban", "payment_card", "email", "phone"]
Term = Annotated[str, StringConstraints(min_length=1, max_length=128)]
ClassifierName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]{0,62}$")]


def _known_region(region: str) -> str:
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise ValueError(f"not a region libphonenumber knows: {region!r} (ISO 3166 alpha-2)")
    return region


class ClassifierDefinition(BaseModel):
    """One named classifier: exactly one of `terms`, `regex`, `detector`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: ClassifierName
    kinds: list[ClassifierKind] | None = Field(default=None, min_length=1)
    terms: list[Term] | None = Field(default=None, min_length=1, max_length=1000)
    case_sensitive: bool | None = None
    whole_words: bool | None = None
    regex: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=MAX_REGEX_CHARS),
            AfterValidator(checked_regex),
        ]
        | None
    ) = None
    detector: DetectorName | None = None
    region: Annotated[str, AfterValidator(_known_region)] | None = None

    @model_validator(mode="after")
    def _one_sort(self) -> ClassifierDefinition:
        sorts = [self.terms is not None, self.regex is not None, self.detector is not None]
        if sum(sorts) != 1:
            raise ValueError("name exactly one of `terms`, `regex` or `detector`")
        if self.terms is None and (self.case_sensitive is not None or self.whole_words is not None):
            raise ValueError("`case_sensitive` and `whole_words` apply to `terms` only")
        if self.region is not None and self.detector != "phone":
            raise ValueError("`region` applies to `detector: phone` only")
        return self

    def compiled(self) -> dict[str, Any]:
        """The form the bundle carries and the service compiles (contract/classifiers.py)."""
        out: dict[str, Any] = {"name": self.name}
        if self.kinds is not None:
            out["kinds"] = sorted(set(self.kinds))
        if self.terms is not None:
            out["terms"] = sorted(set(self.terms))
            out["case_sensitive"] = bool(self.case_sensitive)
            out["whole_words"] = self.whole_words is not False
        elif self.regex is not None:
            out["regex"] = self.regex
        else:
            out["detector"] = self.detector
            if self.region is not None:
                out["region"] = self.region
        return out


def compile_classifiers(
    tenant_level: list[ClassifierDefinition], workspace_level: list[ClassifierDefinition]
) -> list[dict[str, Any]]:
    """A workspace's classifiers: the tenant's and its own, by name (validation has refused
    a name defined twice)."""
    return sorted(
        (definition.compiled() for definition in [*tenant_level, *workspace_level]),
        key=lambda compiled: str(compiled["name"]),
    )
