"""What the expert and KV scenario kinds (Chapter 9, §9.3–9.7) share: count types, catalog-name checks, the header."""

from __future__ import annotations

from typing import Annotated, Collection

from pydantic import Field, field_validator

from harness.specs.models import MODELS, resolve_model_ref
from harness.specs.scenario import SCENARIO_SCHEMA_VERSION, LinkName, _Strict, scenario_version  # noqa: F401 - LinkName re-exported

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]


def check_known(v: str, known: Collection[str], what: str) -> str:
    """`v` when it is a catalog name; else a ValueError that lists the known ones."""
    if v not in known:
        raise ValueError(f"unknown {what} {v!r}; known: {', '.join(known)}")
    return v


def check_model(v: str) -> str:
    """A model catalog name or a path to a Hugging Face config.json."""
    if v not in MODELS and not v.endswith(".json"):
        raise ValueError(f"unknown model {v!r}; known: {', '.join(MODELS)}, or a path to a Hugging Face config.json")
    return resolve_model_ref(v)


class VersionedScenario(_Strict):
    """The header of the expert and KV scenario kinds: schema version, name, description and source."""

    schema_version: int = SCENARIO_SCHEMA_VERSION
    name: str
    description: str = ""
    source: str = ""

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        return scenario_version(v)
