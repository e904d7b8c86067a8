"""The source card (pipeline/source_card.toml) as typed sections: a missing, unknown or mistyped key is
an error naming the file and its place in it."""

from functools import cache

import msgspec

from pipeline.files import read_toml
from pipeline.paths import SOURCE_CARD


class _Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class Index(_Section):
    format_version: str
    boundary: str
    unit: str
    exceeding: list[str]
    caveat: str


class IndexV2(_Section):
    format_version: str
    data_url: str


class CompiledEvidence(_Section):
    same: str
    differ: str
    unknown: str


class Family(_Section):
    """A task family's texts, and the key its files hold the latency limit under."""

    limit_key: str
    method: str
    selection: str
    used_for: str
    configurations: str
    selection_other_limit: str | None = None


class Token(Family, kw_only=True):
    default_itl_deadline_ms: int | float


class Diffusion(Family, kw_only=True):
    default_batch_latency_ceiling_s: dict[str, int | float]


class SourceCard(_Section):
    index: Index
    index_v2: IndexV2
    source: dict[str, str | list[str]]
    compiled_evidence: CompiledEvidence
    token: Token
    diffusion: Diffusion
    workload_labels: dict[str, str]


@cache
def load_source_card() -> SourceCard:
    return read_toml(SOURCE_CARD, SourceCard)
