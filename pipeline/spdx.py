"""energy-index.spdx.json: the index as an SPDX 3.0.1 document of the AI profile, one ai_AIPackage per
model whose inference energy entries are the index figures for a stated reference workload.

The quantities are read from the release's own index files, as published (rounded), and converted by
decimal arithmetic only, so each one is exactly the index figure × the workload's units ÷ 1,000 kWh.
Every time in the document is the upstream commit's, so the same snapshot gives the same bytes.
"""

import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.source_card import load_source_card

SPDX_CONTEXT = "https://spdx.org/rdf/3.0.1/spdx-context.jsonld"
SPDX_FILE = "energy-index.spdx.json"
# Element ids: a URN per release, so no id claims a web address this project does not own.
_NAMESPACE = "urn:energy-index:{release_id}:"


def index_entries(index_dir: Path) -> list[dict[str, Any]]:
    """Every row of every task's index.json under `index_dir`, its figure as the exact decimal written."""
    card = load_source_card()
    entries = []
    for task_file in sorted(index_dir.glob("*/index.json")):
        task = task_file.parent.name
        document = json.loads(task_file.read_text(encoding="utf-8"), parse_float=Decimal)
        unit = document["unit"].removeprefix("Wh per ")
        family = "token" if card.token.limit_key in document else "diffusion"
        limit = document[getattr(card, family).limit_key]
        for row in document["rows"]:
            figure_key = "wh_per_" + unit.replace(" ", "_")
            if figure_key not in row:
                raise PipelineError(f"{task_file}: row {row.get('row_id')} has no {figure_key}")
            entries.append({"task": task, "family": family, "limit": limit, "unit": unit,
                            "boundary": document["boundary"], "figure": Decimal(row[figure_key]), **{
                                key: row[key] for key in ("model_id", "name", "gpu", "row_id")}})
    if not entries:
        raise PipelineError(f"{index_dir}: no index rows to describe")
    return entries


def reference_quantity(figure: Decimal, units: int) -> Decimal:
    """kWh of the reference workload: the index figure (Wh per unit) × `units` ÷ 1,000, exactly."""
    return (figure * units).scaleb(-3)


def decimal_text(value: Decimal) -> str:
    """A decimal as xsd:decimal's lexical form (no exponent, no trailing zeros after the point)."""
    text = format(value.normalize(), "f")
    return text if text != "-0" else "0"


def spdx_document(release_id: str, commit: str | None, commit_time: datetime | None, last_updated: str,
                  entries: list[dict[str, Any]], texts: Any) -> dict[str, Any]:
    """The SPDX 3.0.1 JSON-LD document: creation info, the creating and supplying organizations, the
    SpdxDocument and one ai_AIPackage per model (sorted by model_id), its entries sorted by task and GPU."""
    card = load_source_card()
    namespace = _NAMESPACE.format(release_id=release_id)
    when = (commit_time.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if commit_time is not None
            else f"{last_updated}T00:00:00Z")
    creator = f"{namespace}agent:{texts.spdx_creator}"
    graph: list[dict[str, Any]] = [
        {"type": "CreationInfo", "@id": "_:creationinfo", "specVersion": "3.0.1", "created": when,
         "createdBy": [creator]},
        {"type": "Organization", "spdxId": creator, "creationInfo": "_:creationinfo", "name": texts.spdx_creator},
    ]
    models: dict[str, list[dict[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: (e["model_id"], e["task"], e["gpu"])):
        models.setdefault(entry["model_id"], []).append(entry)
    suppliers = sorted({model_id.partition("/")[0] for model_id in models if "/" in model_id})
    graph += [{"type": "Organization", "spdxId": f"{namespace}supplier:{supplier}", "creationInfo": "_:creationinfo",
               "name": supplier} for supplier in suppliers]
    packages = []
    for model_id, rows in models.items():
        if "/" not in model_id:
            raise PipelineError(f"model {model_id!r} is not a Hugging Face repository id (organization/name)")
        descriptions, sentences = [], []
        for row in rows:
            if row["unit"] not in texts.spdx_workload_units or row["unit"] not in texts.spdx_workloads:
                raise PipelineError(f"index/{row['task']}/index.json: unit Wh per {row['unit']} has no reference "
                                    "workload (pipeline/release.toml: spdx_workloads, spdx_workload_units)")
            quantity = decimal_text(reference_quantity(row["figure"], texts.spdx_workload_units[row["unit"]]))
            descriptions.append({"type": "ai_EnergyConsumptionDescription", "ai_energyQuantity": quantity,
                                 "ai_energyUnit": "kilowattHour"})
            sentences.append(texts.spdx_entry.format(
                quantity=quantity, workload=texts.spdx_workloads[row["unit"]], task=row["task"],
                workload_label=card.workload_labels[row["task"]], gpu=row["gpu"], boundary=row["boundary"],
                limit=texts.spdx_limits[row["family"]].format(limit=row["limit"]), figure=decimal_text(row["figure"]),
                unit=row["unit"], row_id=row["row_id"], commit=commit or "unrecorded"))
        tasks = ", ".join(f"{task} ({card.workload_labels[task]})" for task in dict.fromkeys(r["task"] for r in rows))
        packages.append({
            "type": "ai_AIPackage", "spdxId": f"{namespace}model:{model_id}", "creationInfo": "_:creationinfo",
            "name": rows[0]["name"],
            "comment": texts.spdx_comment.format(entries=" ".join(sentences)),
            "releaseTime": when,
            "suppliedBy": f"{namespace}supplier:{model_id.partition('/')[0]}",
            "software_downloadLocation": f"https://huggingface.co/{model_id}",
            "software_packageVersion": release_id,
            "software_primaryPurpose": "model",
            "ai_energyConsumption": {"type": "ai_EnergyConsumption", "ai_inferenceEnergyConsumption": descriptions},
            "ai_informationAboutApplication": texts.spdx_application.format(release_id=release_id, tasks=tasks),
            "ai_limitation": texts.spdx_limitation,
        })
    ids = [package["spdxId"] for package in packages]
    graph.append({"type": "SpdxDocument", "spdxId": f"{namespace}document", "creationInfo": "_:creationinfo",
                  "name": f"energy-index {release_id}", "profileConformance": ["core", "software", "ai"],
                  "rootElement": ids, "element": [creator, *(f"{namespace}supplier:{s}" for s in suppliers), *ids]})
    return {"@context": SPDX_CONTEXT, "@graph": graph + packages}
