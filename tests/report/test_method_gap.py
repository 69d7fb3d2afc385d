"""report.method_gap: one kernel's rows timed queued and back to back at one shape, and the answer's line."""

from __future__ import annotations

from answers_helpers import row

from attnbench.report import method_gap
from attnbench.report.answers import answer_for
from attnbench.report.headline_data import Artifacts
from attnbench.report.tables import markdown_table

QUEUED = {"timing_method": "cuda_event_per_call_queued"}
STEADY = {"timing_method": "cuda_event_per_call"}


def _rows():
    """FA3 at two lengths timed both ways (back to back 8% and 10% slower), at a third timed one way."""
    return [
        row("flash_attn3", 4352, 1.08, **STEADY, sm_clock_mhz=1740, power_w=689),
        row("xformers_fa3", 4352, 1.00, **QUEUED, sm_clock_mhz=1935, power_w=670),
        row("flash_attn3", 4608, 1.10, **STEADY),
        row("flash_attn3_compiled", 4608, 1.00, **QUEUED),
        row("xformers_fa3", 4608, 1.02, **QUEUED),  # not the fastest queued row: not the one paired
        row("flash_attn3", 4224, 1.000, **QUEUED),
        row("xformers_fa3", 4224, 1.005, **QUEUED),  # timed the same way: the control, 0.5% apart
        row("sdpa_cudnn", 4352, 1.2, **STEADY),  # another kernel: never paired with FA3
    ]


def test_points_pair_the_fastest_row_of_each_method_and_keep_the_same_method_as_the_control():
    found = {(p.seqlen, p.both_ways): p for p in method_gap.points(_rows())}
    assert set(found) == {(4224, False), (4352, True), (4608, True)}
    assert round(found[(4352, True)].gap, 4) == 0.08
    assert found[(4608, True)].burst["provider"] == "flash_attn3_compiled"
    assert round(found[(4608, True)].gap, 4) == 0.10
    assert round(found[(4224, False)].gap, 4) == 0.005


def test_words_say_the_direction_first_then_the_range_the_providers_and_the_control():
    assert method_gap.words(_rows()) == (
        "Part of a lead across the two timing methods is the method: timed back to back (flash_attn3), "
        "FlashAttention-3's kernel ran 8.0% to 10.0% slower than the same kernel queued behind an idle GPU "
        "(flash_attn3_compiled, xformers_fa3) at 2 of its 3 pass-length points; timed alike, its wrappers agree "
        "within 0.5% (1 point); measured on FlashAttention-3's kernel, an estimate for other providers."
    )


def test_no_words_without_a_kernel_timed_both_ways_and_whole_sentences_either_way_round():
    assert method_gap.words([r for r in _rows() if r["seqlen_q"] == 4224]) == ""
    assert method_gap.words([row("flash_attn3", 4608, 1.0, **STEADY)]) == ""  # one provider: no pair
    faster = [row("flash_attn3", 4608, 0.95, **STEADY), row("xformers_fa3", 4608, 1.0, **QUEUED)]
    assert "FlashAttention-3's kernel ran 5.0% faster than the same kernel queued" in method_gap.words(faster)
    straddle = faster + [row("flash_attn3", 4352, 1.05, **STEADY), row("xformers_fa3", 4352, 1.0, **QUEUED)]
    assert ("FlashAttention-3's kernel ran -5.0% to +5.0% (median +0.0%) against the same kernel queued"
            in method_gap.words(straddle))  # fmt: skip


def test_rows_without_a_method_a_time_or_a_pass_are_never_paired():
    nan, unknown = float("nan"), {"timing_method": None}
    for steady in (row("flash_attn3", 4608, 1.1, **unknown),  # an older row, or a CPU timer's
                   row("flash_attn3", 4608, 1.1, timing_method="perf_counter"),
                   row("flash_attn3", 4608, nan, **STEADY),
                   row("flash_attn3", 4608, 1.1, **STEADY, status="error"),
                   row("flash_attn3", 4608, 1.1, **STEADY, over_peak="above the peak")):  # fmt: skip
        assert method_gap.points([steady, row("xformers_fa3", 4608, 1.0, **QUEUED)]) == []


def test_rows_of_another_workload_at_the_same_length_are_never_paired():
    other_mask = [
        row("flash_attn3", 4608, 1.10, **STEADY, mask="full"),
        row("xformers_fa3", 4608, 1.0, **QUEUED),
    ]
    assert method_gap.points(other_mask) == []


def test_table_lists_the_points_timed_both_ways_with_their_clocks():
    table = method_gap.table(_rows())
    assert list(table["seq"]) == [4352, 4608]
    first = table.iloc[0]
    assert (first["back to back"], first["MHz (back to back)"], first["queued"], first["MHz (queued)"]) == (
        "flash_attn3", 1740, "xformers_fa3", 1935)  # fmt: skip
    assert method_gap.table([]).empty


def test_the_flux_answer_adds_the_measured_gap_only_where_its_lead_crossed_the_two_methods():
    crossing = _rows()  # the leader (flash_attn3_compiled at 4608) is queued, SDPA back to back
    crossing.append(row("sdpa_cudnn", 4608, 1.2, **STEADY))
    lines = answer_for("flux_attention", Artifacts(rows=crossing)).caveats
    assert "timed differently" in lines[0]
    assert lines[1].startswith("Part of a lead across the two timing methods is the method")
    alike = [r for r in crossing if r["provider"] != "sdpa_cudnn"] + [row("sdpa_cudnn", 4608, 1.2, **QUEUED)]
    said = answer_for("flux_attention", Artifacts(rows=alike))
    assert not any("Part of a lead" in line for line in said.answer + said.caveats)


def test_the_summary_section_formats_the_table_and_refuses_an_incorrect_row():
    text = markdown_table(method_gap.table(_rows()), method_gap.FORMATS)
    assert (
        "| FlashAttention-3 | fwd | 4352 | flash_attn3 | 1.0800 | 1740 | 689 | xformers_fa3 | 1.0000 | 1935 | 670 | +8.0% |"
        in text
    )
    wrong = [{**r, "ok": False} if r["provider"] == "flash_attn3" else r for r in _rows()]
    assert method_gap.table(wrong).empty and method_gap.words(wrong) == ""  # an incorrect row is never paired
