"""Context-parallel strategies at 8 gloo ranks (the CPU part of the 8-GPU checks): USP 2x4 and 4x2, double ring and
burst with windows 2 and 4. Select with `-m cp8`, skip with `-m "not cp8"`."""

import pytest
from cp_asserts import EXPECTED_ERRORS, assert_matches_reference, assert_same_error_everywhere
from cp_harness import spawned
from cp_worker import correctness_cases

pytestmark = pytest.mark.cp8
SUITES = ("correctness", "errors")
CASES = [case.id for case in correctness_cases(8)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case_id", CASES)
def test_matches_single_process_attention_at_8(case_id):
    assert_matches_reference(spawned(8, SUITES), case_id)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case_id", sorted(EXPECTED_ERRORS))
def test_bad_input_raises_same_error_on_every_rank_at_8(case_id):
    assert_same_error_everywhere(spawned(8, SUITES), case_id)


@pytest.mark.timeout(600)
def test_group_still_works_after_errors_at_8():
    assert_matches_reference(spawned(8, SUITES), "after-errors")
