"""The duty-cycle probe's files in a report: matched to the rows' machine and pass, a back-to-back time
the host set left out, and the Flux answer's lead timed alike beside the lead its page mixed."""

import json

import pytest
from answers_helpers import numbers, row

from attnbench.report import duty_cycle
from attnbench.report.answers import answer_for
from attnbench.report.headline_data import Artifacts

SHAPE = [1, 24, 4608, 128]


def line(provider, sustained, spin, matmul, host=0.1, clock=1700.0):
    """One provider's line as scripts/probe_duty_cycle.py writes it: each mode twice."""
    modes = {mode: [{"ms_median": ms, "sm_clock_mhz": clock}, {"ms_median": ms * 1.002, "sm_clock_mhz": clock}]
             for mode, ms in (("sustained", sustained), ("queued_spin", spin), ("queued_matmul", matmul))}  # fmt: skip
    return {"provider": provider, "modes": modes, "host_ms_per_call": host}


def probe_file(folder, name="duty_cycle-gpu.json", machine="h200-abc", pass_="fwd", lines=None, shape=SHAPE):
    (folder / "measurements").mkdir(exist_ok=True)
    doc = {"gpu": "NVIDIA H200", "machine_id": machine, "shape": shape, "lines": lines or [
        line("te_flash", 0.402, 0.373, 0.433, host=0.29),
        line("sdpa_cudnn", 0.435, 0.403, 0.451),
        {"provider": "flash_attn4", "not_measured": "import failed: ModuleNotFoundError: No module named 'x'"}]}  # fmt: skip
    if pass_ is not None:
        doc["pass"] = pass_
    (folder / "measurements" / name).write_text(json.dumps(doc))
    return folder


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project root (pyproject.toml) the search stops at, as the working directory."""
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_file_is_matched_by_machine_and_pass_and_one_naming_no_pass_is_a_forwards(project):
    probe_file(project, "duty_cycle-a.json", pass_=None)
    probe_file(project, "duty_cycle-b.json", pass_="fwd_bwd", lines=[line("flash_attn4", 1.58, 1.44, 1.71)])
    probe_file(project, "duty_cycle-c.json", machine="h100-xyz")
    assert duty_cycle.probe_of({"h200-abc"}, "fwd")["file"] == "measurements/duty_cycle-a.json"
    assert duty_cycle.probe_of({"h200-abc"}, "fwd_bwd")["file"] == "measurements/duty_cycle-b.json"
    assert duty_cycle.probe_of({"h100-xyz"}, "fwd")["file"] == "measurements/duty_cycle-c.json"
    assert duty_cycle.probe_of({"h200-other-host"}, "fwd") is None  # another host's is never lent


def test_a_broken_file_is_named_and_skipped(project, capsys):
    probe_file(project)
    (project / "measurements" / "duty_cycle-zz.json").write_text("{not json")
    assert duty_cycle.probe_of({"h200-abc"}, "fwd")["file"] == "measurements/duty_cycle-gpu.json"
    assert "duty_cycle-zz.json" in capsys.readouterr().err


def test_a_back_to_back_time_the_host_set_is_left_out():
    doc = {
        "lines": [line("te_flash", 0.401, 0.377, 0.440, host=0.41), line("sdpa_cudnn", 0.437, 0.407, 0.455)]
    }
    timed = duty_cycle.times(doc)
    assert set(timed["te_flash"]) == {"queued_spin", "queued_matmul"}  # host 0.41 ms per 0.40 ms call
    assert timed["sdpa_cudnn"]["sustained"] == pytest.approx(0.437 * 1.001)
    leads = duty_cycle.leads(timed, "te_flash", "sdpa_cudnn")
    assert set(leads) == {"queued_spin", "queued_matmul"} and leads["queued_spin"] == pytest.approx(
        0.407 / 0.377
    )
    # te_flash has no back-to-back time: the lull is sdpa_cudnn's alone
    assert duty_cycle.lull_sentence(timed) == "took 6.9% less time than back to back (1 provider)"
    assert duty_cycle.timed_by_gpu(0.29, 0.40) and not duty_cycle.timed_by_gpu(0.41, 0.40)
    assert not duty_cycle.timed_by_gpu(None, 0.40)  # a host time not recorded proves nothing


@pytest.mark.parametrize("broken", [{"lines": 5}, {"shape": 5}, {"shape": [1, 24]}, {"shape": [None] * 4},
                                    {"lines": [{"provider": "x", "modes": {"sustained": None}}]},
                                    {"lines": [{"provider": "x", "modes": {"queued_spin": [5]}}]},
                                    {"lines": [{"modes": {}}]}])  # fmt: skip
def test_a_malformed_file_is_named_once_and_skipped_never_a_crash(project, capsys, broken):
    probe_file(project)
    doc = json.loads((project / "measurements" / "duty_cycle-gpu.json").read_text())
    (project / "measurements" / "duty_cycle-gpu.json").write_text(json.dumps({**doc, **broken}))
    assert duty_cycle.probe_of({"h200-abc"}, "fwd") is None and duty_cycle.sections({"h200-abc"}) == []
    said = answer_for("flux_attention", Artifacts(rows=flux_rows()))
    assert "timed alike" not in said.answer[0]
    warned = capsys.readouterr().err
    assert warned.count("duty_cycle-gpu.json") == 1 and "is not used" in warned


def flux_rows(env="h200-abc", seq=4608):
    queued = {"timing_method": "cuda_event_per_call_queued", "extra": {"host_ms_per_call": 0.79}}
    shape = {"heads_q": 24, "heads_kv": 24, "head_dim": 128, "mask": "full", "env": env}
    return [row("te_flash", seq, 0.369, **queued, **shape),
            row("sdpa_cudnn", seq, 0.428, timing_method="cuda_event_per_call", **shape)]  # fmt: skip


def test_the_flux_answer_gives_the_lead_timed_alike_where_the_probe_timed_both(project):
    probe_file(project)
    said = answer_for("flux_attention", Artifacts(rows=flux_rows()))
    assert said.answer[0].endswith(
        "1.16× the speed of PyTorch's SDPA (sdpa_cudnn, 0.428 ms); timed alike, 1.08× back to back and 1.08× "
        "queued behind an idle GPU (measurements/duty_cycle-gpu.json)."
    )
    assert numbers(said)["fwd|lead_alike"] == pytest.approx(0.435 / 0.402)  # back to back: the protocol's way
    (alike,) = [n for n in said.numbers if n.key == "fwd|lead_alike"]
    assert (alike.unit, alike.per, alike.detail, alike.higher_is_better) == (
        "×", "wall time, back to back", "te_flash", True)  # fmt: skip
    (lull,) = [
        c for c in said.caveats if "measured on purpose" in c
    ]  # on the line that says how each was timed
    assert lull.startswith("forward: timed differently: te_flash in bursts queued behind an idle GPU")
    assert (
        "; measured on purpose at S 4608 (measurements/duty_cycle-gpu.json, scripts/probe_duty_cycle.py)"
        in lull
    )
    assert "took 7.2%–7.4% less time than back to back (2 providers)" in lull  # te_flash, cudnn


def test_without_a_probe_of_that_machine_or_workload_the_answer_says_nothing_timed_alike(project):
    probe_file(project)
    elsewhere = answer_for("flux_attention", Artifacts(rows=flux_rows(env="h200-elsewhere")))
    assert "timed alike" not in elsewhere.answer[0] and "fwd|lead_alike" not in numbers(elsewhere)
    assert not [c for c in elsewhere.caveats if "measured on purpose" in c]
    # the machine's probe at another length: no lead timed alike, but what the lull is worth there, said so
    shorter = answer_for("flux_attention", Artifacts(rows=flux_rows(seq=4224)))  # the probe timed S 4608
    assert "timed alike" not in shorter.answer[0] and "fwd|lead_alike" not in numbers(shorter)
    assert not [c for c in shorter.caveats if "measured on purpose" in c]


def test_the_summary_section_tables_each_pass_the_machine_was_probed_in(project):
    assert duty_cycle.sections({"h200-abc"}) == []
    probe_file(project, lines=[line("sdpa_cudnn", 0.435, 0.403, 0.451)])
    ((words, lines),) = duty_cycle.sections({"h200-abc"})  # no forward + backward file: one pass
    assert words.startswith("**forward**, B1 S4608 H24 D128 bf16, each mode twice in one process")
    assert "a call took 7.4% less time than back to back (1 provider)" in words
    assert lines == [{"provider": "sdpa_cudnn", "back to back (ms)": pytest.approx(0.435435),
                      "back to back (MHz, lulls included)": 1700.0, "queued behind an idle GPU (ms)": pytest.approx(0.403403),
                      "queued behind an idle GPU (MHz, lulls included)": 1700.0, "queued behind GEMMs (ms)": pytest.approx(0.451451),
                      "queued behind GEMMs (MHz, lulls included)": 1700.0, "host ms per call": 0.1}]  # fmt: skip
    failed = duty_cycle.table({"lines": [{"provider": "flash_attn4", "not_measured": "import failed: x"}]})  # fmt: skip
    assert failed == [{"provider": "flash_attn4", "not measured": "import failed: x"}]


def test_two_files_of_one_machine_and_pass_are_named_and_the_last_by_name_is_used(project, capsys):
    probe_file(project, "duty_cycle-h200.json")
    probe_file(project, "duty_cycle-h200-again.json", lines=[line("sdpa_cudnn", 0.5, 0.4, 0.6)])
    assert duty_cycle.probe_of({"h200-abc"}, "fwd")["file"] == "measurements/duty_cycle-h200.json"
    warned = capsys.readouterr().err
    assert "one machine and pass (fwd) in several files; the last is used" in warned
    assert "duty_cycle-h200-again.json" in warned
