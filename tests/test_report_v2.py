"""The report's index tables show each figure's range, validity codes and class as version 2 of the index
files holds them."""

from pathlib import Path

import msgspec
import pytest
from test_report import report, table_rows  # noqa: F401 (the module's report fixture)

from pipeline.paths import Paths

pytestmark = pytest.mark.report  # it writes the report


def test_index_tables_show_range_validity_and_class_beside_each_figure(report: Path, newest_build: Paths) -> None:
    rows = msgspec.json.decode((newest_build.index_dir / "v2" / "lm-arena-chat" / "index.json").read_bytes())["rows"]
    by_key = {(row["model_id"], row["gpu"]): row for row in rows}
    shown = table_rows(report / "index.html", "lm-arena-chat", "index-table")
    assert len(shown) == len(rows)
    for cells in shown:
        row = by_key[(cells[0], cells[1])]
        assert cells[6] == repr(row["wh_per_million_output_tokens"])
        expected_range = "measured once" if row["range"] is None else f"{row['range']['low']} to {row['range']['high']}"
        assert cells[7:10] == [expected_range, ", ".join(row["validity"]), row["energy_class"]]
