"""Load the source card (pipeline/source_card.toml) and reject unknown or missing keys."""

import tomllib
from functools import cache
from typing import Any

from pipeline.errors import PipelineError
from pipeline.paths import SOURCE_CARD

EXPECTED_SECTIONS = {"index", "source", "token", "diffusion", "workload_labels"}


@cache
def load_source_card() -> dict[str, Any]:
    with SOURCE_CARD.open("rb") as handle:
        card = tomllib.load(handle)
    if set(card) != EXPECTED_SECTIONS:
        raise PipelineError(
            f"{SOURCE_CARD}: sections {sorted(card)} differ from the expected {sorted(EXPECTED_SECTIONS)}"
        )
    return card
