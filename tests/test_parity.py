"""A change of code that is not meant to change the outputs changes none: every table and view of the
eleven-snapshot history and every index and release file of each snapshot equal those recorded in
tests/parity_reference.json (`python tests/parity.py record` with the code they should equal)."""

from pathlib import Path

import msgspec
import pytest
from parity import REFERENCE, build_fingerprints, differences


@pytest.mark.slow
def test_every_view_index_and_release_file_equals_the_recorded_reference(tmp_path: Path) -> None:
    reference = msgspec.json.decode(REFERENCE.read_bytes())
    current = build_fingerprints(tmp_path)
    assert len(current["files"]) == 11 and current["database"]["history"]
    assert differences(reference, current) == []
