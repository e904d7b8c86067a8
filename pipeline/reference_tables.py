"""The reference tables: what the build makes from its parameters and the project's declarations rather
than from a snapshot (schemas.REFERENCE_TABLES, declared in the field dictionary). Each TOML file is read
strictly into msgspec structs (a misspelt key is an error, not ignored), checked, validated as an
ingested table is (its pandera schema) and published as Parquet beside the data tables."""

from pathlib import Path
from typing import Annotated, Literal

import duckdb
import msgspec
import pyarrow
import pyarrow.parquet as pq

from pipeline.declared_tables import arrow_rows, create_table
from pipeline.errors import PipelineError
from pipeline.files import read_toml, write_bytes_atomic
from pipeline.paths import AUDIT_RULES, BOUNDARY_FACTORS, ECOLOGITS, INDEX_V2, LATENCY_TIERS, Paths
from pipeline.source_card import load_source_card
from pipeline.sql_objects import sql_object
from schemas import REFERENCE_TABLES, described
from schemas.rules import RATED_BOARD_POWER_W

Positive = Annotated[float, msgspec.Meta(gt=0)]
Factor = Annotated[float, msgspec.Meta(ge=1)]
Text = Annotated[str, msgspec.Meta(pattern=r"\S")]


class AuditRule(msgspec.Struct, forbid_unknown_fields=True):
    table: str
    severity: Literal["info", "warn"]
    tolerance: float
    why: str
    direction: Literal["around_one", "at_least", "at_most"]
    measure: str


class LatencyTiers(msgspec.Struct, forbid_unknown_fields=True):
    token: dict[str, Annotated[list[Positive], msgspec.Meta(min_length=1)]] = {}
    diffusion: dict[str, dict[str, Annotated[list[Positive], msgspec.Meta(min_length=1)]]] = {}


class BoundaryFactor(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A [[factor]] of boundary_factors.toml, its fields in the boundary_factors table's column order."""
    id: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")]
    boundary: Literal["server", "facility"]
    factor_low: Factor | None = None
    factor_central: Factor | None = None
    factor_high: Factor | None = None
    host_watts_per_gpu: Annotated[float, msgspec.Meta(gt=0)] | None = None
    central: bool
    covers: Text
    derivation: Text
    source: Text
    url: Annotated[str, msgspec.Meta(pattern=r"^https://")]
    year: int
    quoted_figure: Text


class BoundaryFactors(msgspec.Struct, forbid_unknown_fields=True):
    factor: Annotated[list[BoundaryFactor], msgspec.Meta(min_length=1)]


class ValidityCode(msgspec.Struct, forbid_unknown_fields=True):
    """A [[validity]] of index_v2.toml, its fields in the validity_codes table's column order."""
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z]+(_[a-z]+)*$")]
    applies_to: Literal["all", "token"]
    threshold: float
    test: Text
    why: Text


class EnergyClass(msgspec.Struct, forbid_unknown_fields=True):
    letter: Annotated[str, msgspec.Meta(pattern=r"^[A-Z]$")]
    below: Annotated[float, msgspec.Meta(gt=0)] | None = None


class EnergyClassScale(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where the energy class scale comes from, and the boundary whose figures its letters are read at."""
    boundary: Literal["gpu_only", "server", "facility"]
    source: Text


class IndexV2(msgspec.Struct, forbid_unknown_fields=True):
    validity: Annotated[list[ValidityCode], msgspec.Meta(min_length=1)]
    energy_class_scale: EnergyClassScale
    energy_class: Annotated[list[EnergyClass], msgspec.Meta(min_length=1)]


def energy_class_scale(path: Path = INDEX_V2) -> EnergyClassScale:
    """The energy class scale's source and boundary, as index_v2.toml declares them."""
    return read_toml(path, IndexV2).energy_class_scale


def load_index_v2(path: Path = INDEX_V2) -> tuple[list[tuple], list[tuple]]:
    """The validity_codes rows (with their position) and the energy_classes rows (letter, lower bound,
    upper bound, the scale's boundary) of an index_v2.toml: codes distinct; letters in order with rising
    bounds, only the last unbounded."""
    declared = read_toml(path, IndexV2)
    codes = [code.code for code in declared.validity]
    problems = [f"code {code}: declared more than once" for code in sorted({c for c in codes if codes.count(c) > 1})]
    bounds = [entry.below for entry in declared.energy_class]
    if None in bounds[:-1] or bounds[-1] is not None or bounds[:-1] != sorted(set(bounds[:-1])):
        problems.append("energy_class: upper bounds must rise, and only the last class has none")
    if problems:
        raise PipelineError(f"{path}: index version 2 declarations are not valid", problems)
    validity = [(position, *msgspec.structs.astuple(code)) for position, code in enumerate(declared.validity, 1)]
    classes = [(entry.letter, 0.0 if number == 0 else bounds[number - 1], entry.below,
                declared.energy_class_scale.boundary) for number, entry in enumerate(declared.energy_class)]
    return validity, classes


class EcologitsCoefficients(msgspec.Struct, forbid_unknown_fields=True):
    version: str
    source: str
    alpha: float
    beta: float
    gamma: float
    batch_size: int
    quantization_bits: int
    gpu_memory_gb: float
    memory_overhead: float


def load_audit_rules() -> list[tuple]:
    """The audit_rules table's rows: rule, table_name, severity, tolerance, direction, measure, why."""
    rules = read_toml(AUDIT_RULES, dict[str, AuditRule])
    for rule, fields in rules.items():
        if round(fields.tolerance, 6) != fields.tolerance:
            raise PipelineError(f"{AUDIT_RULES}: $.{rule}.tolerance: at most six decimals (audit_findings writes six)")
    return [(rule, f.table, f.severity, f.tolerance, f.direction, f.measure, f.why) for rule, f in rules.items()]


def load_latency_tiers(path: Path, metrics: dict[str, list[str]]
                       ) -> list[tuple[str, str | None, str, float | None, float | None]]:
    """(family, task, latency metric, limit in ms, limit in s) rows from a latency_tiers.toml layout, each
    metric one of its family's in `metrics` (the latency_metrics view): a token task's limits (inter-token
    latency) are in ms, a diffusion task's (batch latency) in s, each in the column of its unit."""
    declared = read_toml(path, LatencyTiers)
    rows, problems = [], []
    groups = [("token", None, declared.token),
              *(("diffusion", task, tiers) for task, tiers in declared.diffusion.items())]
    for family, task, limits in groups:
        for metric, values in limits.items():
            if metric not in metrics[family]:
                where = f"$.{family}{'.' + task if task else ''}.{metric}"
                problems.append(f"{where}: not a latency metric of {family} tasks ({', '.join(metrics[family])})")
            rows += [(family, task, metric, *((value, None) if family == "token" else (None, value)))
                     for value in sorted(set(values))]
    if problems:
        raise PipelineError(f"{path}: latency tiers are not valid", problems)
    return rows


def load_boundary_factors(path: Path = BOUNDARY_FACTORS) -> list[dict[str, object]]:
    """The [[factor]] rows of a boundary_factors.toml, checked strictly: every key present and no other,
    each of its type, distinct ids, either the three factors (of at least 1, low <= central <= high) or
    host_watts_per_gpu (the factor then derived per GPU by the view boundary_factors_by_gpu), and one
    central row per boundary."""
    rows = [msgspec.structs.asdict(factor) for factor in read_toml(path, BoundaryFactors).factor]
    problems = []
    for number, row in enumerate(rows):
        factors = [row["factor_low"], row["factor_central"], row["factor_high"]]
        if row["host_watts_per_gpu"] is not None:
            if factors != [None, None, None]:
                problems.append(f"$.factor[{number}]: host_watts_per_gpu derives the factors per GPU; "
                                "give no factor_low, factor_central or factor_high beside it")
        elif None in factors:
            problems.append(f"$.factor[{number}]: needs factor_low, factor_central and factor_high "
                            "(or host_watts_per_gpu)")
        elif not factors[0] <= factors[1] <= factors[2]:
            problems.append(f"$.factor[{number}]: factors must satisfy "
                            "1 <= factor_low <= factor_central <= factor_high")
    ids = [row["id"] for row in rows]
    problems += [f"id {name}: used by more than one factor" for name in sorted({i for i in ids if ids.count(i) > 1})]
    for boundary in ("server", "facility"):
        central = sum(row["boundary"] == boundary and row["central"] for row in rows)
        if central != 1:
            problems.append(f"boundary {boundary}: needs exactly one row with central = true, has {central}")
    if problems:
        raise PipelineError(f"{path}: boundary factors are not valid", problems)
    return rows


def load_reference_tables(connection: duckdb.DuckDBPyConnection, parameters: tuple,
                          latency_tiers: Path = LATENCY_TIERS) -> None:
    """The tables the build makes from its parameters and declarations rather than from a snapshot
    (schemas.REFERENCE_TABLES, declared in the field dictionary): the build parameters, GPU ratings, latency
    ceilings and tiers, audit rules, EcoLogits' coefficients, boundary factors. Each is validated as an
    ingested table is (its pandera schema); the build then publishes each as OUT/parquet/<table>/data.parquet
    so that the views can be run over the Parquet alone (Spark: pipeline/spark.py)."""
    from pipeline.validate import raise_failures, table_failures

    connection.execute(sql_object("latency_metrics").statement)
    metrics = dict(connection.execute("select family, list(latency_metric order by metric_order)"
                                      " from latency_metrics group by family").fetchall())
    ceilings = load_source_card().diffusion.default_batch_latency_ceiling_s
    rows = {
        "build_parameters": [parameters],
        "latency_tiers": load_latency_tiers(latency_tiers, metrics),
        "ecologits_coefficients": [msgspec.structs.astuple(read_toml(ECOLOGITS, EcologitsCoefficients))],
        "boundary_factors": [tuple(row.values()) for row in load_boundary_factors()],
        "gpu_ratings": sorted(RATED_BOARD_POWER_W.items()),
        "audit_rules": load_audit_rules(),
        "latency_ceilings": sorted(ceilings.items()),
    }
    rows["validity_codes"], rows["energy_classes"] = load_index_v2()
    tables = {table: arrow_rows(table, rows[table]) for table in REFERENCE_TABLES}
    failures, _ = table_failures(tables)
    raise_failures(failures)
    for table, arrow in tables.items():
        create_table(connection, table, arrow)


def publish_reference_tables(connection: duckdb.DuckDBPyConnection, paths: Paths) -> None:
    """Write each reference table as Parquet beside the data tables, described as the ingested tables
    are; a file that would not change is left untouched."""
    for table in REFERENCE_TABLES:
        rows = connection.sql(f"select * from {table} order by all").to_arrow_table()
        buffer = pyarrow.BufferOutputStream()
        pq.write_table(rows.cast(described(table, rows.schema)), buffer, compression="zstd")
        write_bytes_atomic(paths.reference_parquet_path(table), buffer.getvalue().to_pybytes())
