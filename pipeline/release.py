"""energy-index release: OUT/release/<snapshot-id>/, a citable data release other tools take in as it is.

What it holds: the index JSON files; Parquet and CSV of the main views (written by DuckDB, rows in a
fixed order); datapackage.json (a Frictionless Data Package: every field's type, unit and description
from the field dictionary, every file's sha256); croissant.json (Croissant 1.0 metadata: licence,
citation, distributions with checksums, one record set per table; and Croissant RAI 1.0's properties);
energy-index.spdx.json (SPDX 3.0.1, AI profile: one AI package per model, its inference energy for a
reference workload); CITATION.cff; CHANGES.md (the index changes since the previous snapshot, from the
stored index_changes); SHA256SUMS. The same database gives the same bytes: nothing in it depends on
the time or the machine.
"""

import functools
from datetime import timezone
import shutil
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pyarrow

from pipeline import jsontext
from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.files import read_toml, staged_directory
from pipeline.fingerprint import file_sha256
from pipeline.paths import Paths
from pipeline.source_card import load_source_card
from pipeline.spdx import SPDX_FILE, index_entries, spdx_document
from schemas.types import BY_DUCKDB

# The release's tables, in the order the metadata lists them: each is the view of its name, and its
# files are named after it (data/<view>.parquet and .csv).
RELEASE_TABLES = ("best_configurations", "index_boundaries", "boundary_factors", "energy_per_functional_unit",
                  "tiered_best_configurations", "efficiency_curves", "energy_latency_frontier", "configurations",
                  "diffusion_configurations_current")
# Croissant 1.0's JSON-LD context: its terms are cr:<term> but for these.
_CONTEXT_TERMS = {
    "@language": "en", "@vocab": "https://schema.org/", "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/", "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "dct": "http://purl.org/dc/terms/",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "rai": "http://mlcommons.org/croissant/RAI/",
    "sc": "https://schema.org/",
}
CROISSANT_CONTEXT = {term: _CONTEXT_TERMS.get(term, f"cr:{term}") for term in (
    "@language @vocab citeAs column conformsTo cr data dataType dct examples extract field fileProperty fileObject "
    "fileSet format includes isLiveDataset jsonPath key md5 parentField path rai recordSet references regex repeated "
    "replace samplingRate sc equivalentProperty separator source subField transform").split()}


# The tables whose metadata says the factors are assumptions (release.toml: boundary_note).
_BOUNDARY_TABLES = ("index_boundaries", "boundary_factors", "energy_per_functional_unit")


class Texts(msgspec.Struct, frozen=True):
    citation: str
    package_title: str
    package_description: str
    croissant_description: str
    boundary_note: str
    ecologits_method: str
    ecologits_boundary: str
    spdx_creator: str
    spdx_workloads: dict[str, str]
    spdx_workload_units: dict[str, int]
    spdx_limits: dict[str, str]
    spdx_entry: str
    spdx_comment: str
    spdx_limitation: str
    spdx_application: str
    rai_conforms_to: str
    rai_data_collection: str
    rai_data_collection_type: list[str]
    rai_data_collection_raw_data: str
    rai_data_collection_timeframe: list[str]
    rai_data_preprocessing_protocol: list[str]
    rai_data_limitations: list[str]
    rai_data_biases: list[str]
    rai_data_use_cases: list[str]
    rai_personal_sensitive_information: str
    rai_data_release_maintenance_plan: str


@functools.cache
def _texts() -> Texts:
    return read_toml(Path(__file__).with_name("release.toml"), Texts)


def _json(document: Any) -> bytes:
    return jsontext.dumps(document, ensure_ascii=False) + b"\n"


def write_release(paths: Paths) -> Path:
    """Write OUT/release/<index snapshot>/ (replaced whole) and return it."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        snapshot = fetch_dicts(connection, """
            select s.snapshot_id, s.commit, s.commit_subject, s.commit_time, s.last_updated::varchar as last_updated,
                   h.previous_snapshot_id
            from snapshots as s join snapshot_history as h using (snapshot_id)
            where snapshot_id = (select snapshot_id from index_snapshot)""", {})[0]
        release_id, target = snapshot["snapshot_id"], paths.out / "release" / snapshot["snapshot_id"]
        with staged_directory(target) as staging:
            shutil.copytree(paths.index_dir, staging / "index")
            (staging / "data").mkdir()
            (staging / "adapters").mkdir()
            tables = {view: _write_table(connection, view, staging / "data") for view in RELEASE_TABLES}
            refits = fetch_dicts(connection, """
                select * exclude (snapshot_id) from ecologits_refit
                order by task, gpu, latency_metric, latency_limit""", {})
            coefficients = fetch_dicts(connection, "select version, source, alpha, beta, gamma, batch_size "
                                                   "from ecologits_coefficients", {})[0]
            factor_sources = fetch_dicts(connection, """
                select source, url, year, list(boundary order by boundary) as boundaries
                from boundary_factors group by source, url, year order by source, url""", {})
            changes = fetch_dicts(connection, """
                select task, model_id, gpu, change, old_row_id, new_row_id, old_wh_per_unit, new_wh_per_unit,
                       relative_change, unit_label
                from index_changes where newer_snapshot_id = $id
                order by abs(relative_change) desc nulls last, task, model_id, gpu""", {"id": release_id})
            card = load_source_card().source
            (staging / "adapters" / "ecologits.json").write_bytes(_json(_ecologits(release_id, coefficients, refits)))
            (staging / "CHANGES.md").write_bytes(_changes(snapshot, changes).encode())
            citation = _texts().citation.format(release_id=release_id, **card)
            (staging / "CITATION.cff").write_bytes(citation.encode())
            package, croissant = _metadata(card, release_id, staging, tables, factor_sources)
            croissant = {**croissant, **_responsible_ai(card, snapshot)}
            (staging / "datapackage.json").write_bytes(_json(package))
            (staging / "croissant.json").write_bytes(_json(croissant))
            spdx = spdx_document(release_id, snapshot["commit"], snapshot["commit_time"], snapshot["last_updated"],
                                 index_entries(staging / "index"), _texts())
            (staging / SPDX_FILE).write_bytes(_json(spdx))
            files = sorted(p for p in staging.rglob("*") if p.is_file())
            sums = "".join(f"{file_sha256(p)}  {p.relative_to(staging).as_posix()}\n" for p in files)
            (staging / "SHA256SUMS").write_text(sums, encoding="utf-8")
    return target


def _write_table(connection: duckdb.DuckDBPyConnection, view: str, folder: Path) -> list[dict[str, Any]]:
    """Write the view's Parquet and CSV, rows in a fixed order, into `folder`; return its field dictionary."""
    fields = fetch_dicts(connection, """
        select column_name, data_type, unit, description || coalesce(' Unit: ' || unit || '.', '') as description
        from data_dictionary where object_name = $view order by position""", {"view": view})
    columns = ", ".join(f'"{field["column_name"]}"' for field in fields)
    # Through Arrow with every column nullable: DuckDB's writer marks a column required when the
    # table's statistics show no null anywhere in it, so the same rows would get other bytes
    # from a database whose other snapshots have nulls there.
    rows = connection.sql(f"select {columns} from {view} order by all").to_arrow_table()
    connection.register("release_rows", rows.cast(pyarrow.schema([f.with_nullable(True) for f in rows.schema])))
    for extension, options in (("parquet", "format parquet, compression zstd"), ("csv", "format csv, header true")):
        target = str(folder / f"{view}.{extension}").replace("'", "''")
        connection.execute(f"copy (select * from release_rows) to '{target}' ({options})")
    connection.unregister("release_rows")
    return fields


def _metadata(card: dict[str, Any], release_id: str, root: Path, tables: dict[str, list[dict[str, Any]]],
              factor_sources: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """datapackage.json and croissant.json: a resource and a record set per table, from the field dictionary."""
    resources, distribution, record_sets = [], [], []
    sources = [{"title": f"{s['source']} ({s['year']})", "path": s["url"]} for s in factor_sources]
    cited = "; ".join(f"{s['source']} ({s['year']}, {s['url']}; {' and '.join(s['boundaries'])})"
                      for s in factor_sources)
    for view, fields in tables.items():
        path, boundary = f"data/{view}.csv", view in _BOUNDARY_TABLES
        kind = "The reference table" if view == "boundary_factors" else "The view"
        sha256, what = file_sha256(root / path), f"{kind} {view} of the energy-index database"
        resources.append({
            "name": view.replace("_", "-"), "path": path, "format": "csv", "mediatype": "text/csv",
            "encoding": "utf-8", "bytes": (root / path).stat().st_size, "hash": f"sha256:{sha256}",
            "description": f"{what}, snapshot {release_id}." + (_texts().boundary_note if boundary else ""),
            **({"sources": sources} if boundary else {}),
            "schema": {"fields": [{"name": f["column_name"], "type": BY_DUCKDB[f["data_type"]].frictionless,
                                   "description": f["description"], **({"unit": f["unit"]} if f["unit"] else {})}
                                  for f in fields]},
        })
        distribution.append({"@type": "cr:FileObject", "@id": f"{view}.csv", "name": f"{view}.csv",
                             "contentUrl": path, "encodingFormat": "text/csv", "sha256": sha256})
        record_sets.append({
            "@type": "cr:RecordSet", "@id": view, "name": view,
            "description": f"{what}." + (f"{_texts().boundary_note} Sources: {cited}." if boundary else ""),
            "field": [{
                "@type": "cr:Field", "@id": f"{view}/{f['column_name']}", "name": f["column_name"],
                "description": f["description"], "dataType": BY_DUCKDB[f["data_type"]].croissant,
                "source": {"fileObject": {"@id": f"{view}.csv"}, "extract": {"column": f["column_name"]}},
            } for f in fields],
        })
    package = {
        "name": "energy-index",
        "title": _texts().package_title,
        "version": release_id,
        "description": _texts().package_description,
        "homepage": card["url"],
        "licenses": [{"name": "Apache-2.0", "path": "https://www.apache.org/licenses/LICENSE-2.0",
                      "title": card["licence"]}],
        "sources": [{"title": card["name"], "path": card["url"]}, *sources],
        "resources": resources,
    }
    croissant = {
        "@context": CROISSANT_CONTEXT,
        "@type": "sc:Dataset",
        "name": "energy-index",
        "conformsTo": ["http://mlcommons.org/croissant/1.0", _texts().rai_conforms_to],
        "description": _texts().croissant_description.format(release_id=release_id),
        "version": "1.0.0",
        "license": "https://www.apache.org/licenses/LICENSE-2.0",
        "url": card["url"],
        "citeAs": card["cite"] + ", " + card["cite_url"],
        **({"datePublished": release_id[:10]} if release_id[:4].isdigit() else {}),
        "distribution": distribution,
        "recordSet": record_sets,
    }
    return package, croissant


def _responsible_ai(card: dict[str, Any], snapshot: dict[str, Any]) -> dict[str, Any]:
    """croissant.json's Responsible AI (Croissant RAI 1.0) properties, from the source card and the
    snapshot (release.toml: rai_*)."""
    texts, source_card = _texts(), load_source_card()
    # In UTC, as the snapshot id dates it: DuckDB hands the time over in the session's time zone.
    commit_time = snapshot["commit_time"] and snapshot["commit_time"].astimezone(timezone.utc)
    values = {**card, "caveat": source_card.index.caveat, "commit": snapshot["commit"] or "unrecorded",
              "commit_date": commit_time.strftime("%Y-%m-%d") if commit_time else "commit date unrecorded",
              "compiled": snapshot["last_updated"],
              "token_method": source_card.token.method,
              "diffusion_method": source_card.diffusion.method.format(unit="image or video")}

    def fill(text: str) -> str:
        return text.format(**values)

    return {
        "rai:dataCollection": fill(texts.rai_data_collection),
        "rai:dataCollectionType": texts.rai_data_collection_type,
        "rai:dataCollectionRawData": fill(texts.rai_data_collection_raw_data),
        "rai:dataCollectionTimeframe": [fill(date) for date in texts.rai_data_collection_timeframe],
        "rai:dataPreprocessingProtocol": [fill(text) for text in texts.rai_data_preprocessing_protocol],
        "rai:dataLimitations": [fill(text) for text in texts.rai_data_limitations],
        "rai:dataBiases": [fill(text) for text in texts.rai_data_biases],
        "rai:dataUseCases": [fill(text) for text in texts.rai_data_use_cases],
        "rai:personalSensitiveInformation": fill(texts.rai_personal_sensitive_information),
        "rai:dataReleaseMaintenancePlan": fill(texts.rai_data_release_maintenance_plan),
    }


def _ecologits(release_id: str, coefficients: dict[str, Any], refits: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "snapshot_id": release_id,
        "method": _texts().ecologits_method,
        "boundary": _texts().ecologits_boundary,
        "ecologits": coefficients,
        # Fitted floats to 6 significant digits, more than the fit's own precision.
        "fits": [{key: float(f"{value:.6g}") if isinstance(value, float) else value for key, value in row.items()}
                 for row in refits],
    }


def _changes(snapshot: dict[str, Any], changes: list[dict[str, Any]]) -> str:
    text = f"# Changes in {snapshot['snapshot_id']}\n\n"
    if snapshot["previous_snapshot_id"] is None:
        return text + "The first snapshot in the database: nothing to compare with.\n"
    commit = f"upstream commit {snapshot['commit'][:7]}" if snapshot["commit"] else "the upstream"
    subject = f" (\"{snapshot['commit_subject']}\")" if snapshot["commit_subject"] else ""
    text += f"Index rows that {commit}{subject} changed since {snapshot['previous_snapshot_id']}: {len(changes)}.\n\n"
    if changes:
        text += ("| task | model | GPU | change | old → new configuration | old → new | move |\n"
                 "| --- | --- | --- | --- | --- | --- | --- |\n")
    for row in changes:
        figures = " → ".join("—" if figure is None else f"{figure:.4g}"
                             for figure in (row["old_wh_per_unit"], row["new_wh_per_unit"]))
        configurations = f"{row['old_row_id'] or '—'} → {row['new_row_id'] or '—'}"
        move = "—" if row["relative_change"] is None else f"{row['relative_change'] * 100:+.1f} %"
        text += (f"| {row['task']} | {row['model_id']} | {row['gpu']} | {row['change']} | {configurations} | "
                 f"{figures} Wh per {row['unit_label']} | {move} |\n")
    return text
