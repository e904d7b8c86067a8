"""energy-index diff: a summary first, figures rounded as the index rounds them, and a text that fits the terminal."""

import json
import re

from conftest import cli

from pipeline.paths import Paths


def test_diff_leads_with_a_summary_rounds_like_the_index_and_says_it_swapped(history_build: Paths) -> None:
    out = history_build.out
    result = cli("diff", "2026-02-16-7885788", "2025-11-30-9fa07d1", "--out", out, "--limit", "5")
    assert result.returncode == 0
    assert "2026-02-16-7885788 is newer than 2025-11-30-9fa07d1 in commit order; comparing" in result.stderr
    text = result.stdout
    assert text.startswith("2025-11-30-9fa07d1 → 2026-02-16-7885788")
    assert text.index("Summary") < text.index("Index rows, largest move first") < text.index("Fields changed")
    assert "index rows changed: 11 (10 best configuration changed, 1 added)" in text
    assert "-42.5 %  0.1634 → 0.0939  Wh per image" in text  # 4 decimals per image, as the index files
    assert "None" not in text and "#None" not in text
    assert "ulysses" not in text, "one identity format: the row_id's"
    moves = [line.split()[0] for line in text.splitlines() if line.strip().endswith(("u1r1", "/128"))]
    assert moves
    narrow = cli("diff", "2025-11-30-9fa07d1", "2026-02-16-7885788", "--out", out)
    document = json.loads(cli("diff", "2025-11-30-9fa07d1", "2026-02-16-7885788", "--out", out,
                              "--format", "json").stdout)
    assert list(document)[:5] == ["older_snapshot_id", "newer_snapshot_id", "swapped", "relative_tolerance", "summary"]
    assert document["summary"]["index_rows_changed"] == len(document["index_changes"]) == 11
    assert narrow.returncode == 0


def test_diff_fits_a_terminal_width(history_build: Paths) -> None:
    from pipeline.diff import format_text, snapshot_diff

    text = format_text(snapshot_diff(history_build, "2025-11-30-9fa07d1", "2026-02-16-7885788"), 20, width=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "0.1634 → 0.0939" in text, "figures are never cut"


def test_diff_at_80_columns_never_cuts_two_identifiers_to_one_text(history_build: Paths) -> None:
    from pipeline.diff import format_text, snapshot_diff

    diff = snapshot_diff(history_build, "2025-11-30-9fa07d1", "2026-02-16-7885788")
    text = format_text(diff, 20, width=80)
    sections = text.split("\n\n")
    index = next(s for s in sections if s.startswith("Index rows")).splitlines()[3:]
    added = next(s for s in sections if s.startswith("Configurations added")).splitlines()[3:]
    shown_models = [re.split(r"\s{2,}", line.strip())[5] for line in index]
    models = [row["model_id"] for row in diff["index_changes"][:len(index)]]
    assert len(set(shown_models)) == len(set(models)) == len(set(zip(shown_models, models))) == 11
    shown = [tuple(re.split(r"\s{2,}", line.strip())[2:4]) for line in added]
    changes = [c for c in diff["configuration_changes"] if c["change"] in ("added", "removed")][:len(added)]
    full = [(c["model_id"], c["configuration"], c["repeat"]) for c in changes]
    assert len(set(shown)) == len(set(full)) == len(set(zip(shown, full))) == 20
    fields = next(s for s in sections if s.startswith("Fields changed")).splitlines()[1:]
    assert max(len(line) for line in added + fields) <= 80
