"""Distributed dilated attention at 2 and 4 gloo ranks against the single-process definition.

dilated_worker.py states the inputs and tolerances. The configurations have segments that stay inside
a rank's shard (no communication), segments that span 2 and 4 ranks (all-gather of the kept K/V in a
subgroup, reduce-scatter of dK/dV), and a pattern that leaves positions uncovered (LSE -inf rows).
"""

import pytest
from dilated_harness import records_of
from dilated_worker import case_id, cases

CASES = [(world, case_id(*c)) for world in (2, 4) for c in cases(world)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world,case", CASES, ids=[f"w{w}-{c}" for w, c in CASES])
def test_matches_single_process_definition(world, case):
    for record in records_of(world, case):
        for name, e in record["errors"].items():
            assert e["same_infinities"], f"rank {record['rank']} {name}: -inf rows differ from the reference"
            assert e["error"] <= record["tolerance"][name], f"rank {record['rank']} {name}: {e['error']:.3g}"


@pytest.mark.timeout(600)
def test_uncovered_rows_are_exercised():
    """The no-r1 pattern really has rows that no branch keeps (else the -inf path is untested)."""
    for record in records_of(2, case_id("no-r1", True, "float64")):
        assert record["errors"]["lse"]["infinite"] > 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world", [2, 4])
def test_bad_segment_length_is_the_same_clear_error_on_every_rank(world):
    errors = {r["error"] for r in records_of(world, "bad-segment")}
    assert len(errors) == 1 and None not in errors
    assert "branch 0 (w=16, r=1)" in errors.pop()
