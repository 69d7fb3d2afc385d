"""Profile resolution and the resolved profile.json, shared by every study (bench/profiles.py), and the
Flux report's profiles that use them."""

import json

import pytest

from attnbench.bench.profiles import NOT_GPU, read_profile, resolve_name, write_profile
from attnbench.studies.flux_attention import profiles as flux

PROFILES = {"smoke": {"device": "any"}, "default": {"device": "cuda"}, "full": {"device": "cuda"}}


def test_auto_is_default_with_cuda_and_smoke_without():
    assert resolve_name("auto", PROFILES, cuda=True) == "default"
    assert resolve_name("auto", PROFILES, cuda=False) == "smoke"
    assert resolve_name("full", PROFILES, cuda=True) == "full"
    assert resolve_name("smoke", PROFILES, cuda=True) == "smoke"


def test_bad_name_and_gpu_profile_without_cuda_say_what_to_use():
    with pytest.raises(ValueError, match="params.profile must be auto, smoke, default, full; got 'huge'"):
        resolve_name("huge", PROFILES, cuda=True)
    with pytest.raises(ValueError, match="'full' needs CUDA.*use profile=smoke"):
        resolve_name("full", PROFILES, cuda=False)


def test_written_profile_reads_back_and_bad_files_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_profile({"profile": "smoke", "device": "cpu"}, {"gpu": None})
    assert read_profile(tmp_path) == {"profile": "smoke", "device": "cpu"}
    assert json.loads((tmp_path / "env.json").read_text()) == {"gpu": None}
    with pytest.raises(FileNotFoundError, match=r"nowhere/profile\.json: no resolved profile"):
        read_profile(tmp_path / "nowhere")
    (tmp_path / "profile.json").write_text('{"profile":\n')
    with pytest.raises(ValueError, match=r"profile\.json:2: not JSON"):
        read_profile(tmp_path)


def test_flux_profiles_resolve_as_the_gpu_cell_did():
    smoke = flux.resolve("auto", False, [4224], ["sdpa"])
    assert smoke["profile"] == "smoke" and smoke["device"] == "cpu" and smoke["label"] == NOT_GPU
    assert smoke["seq_lens"] == [288, 320] and smoke["provider_filter"] == ["sdpa"]
    default = flux.resolve("auto", True, [4224, 4352], [])
    assert default["seq_lens"] == [4224, 4352] and default["heads"] == 24 and "label" not in default
    assert list(default)[:7] == [
        "profile",
        "requested",
        "device",
        "batch",
        "mask",
        "passes",
        "provider_filter",
    ]
    assert flux.resolve("full", True, [4224], [])["seq_lens"][0] == 4096
    with pytest.raises(ValueError, match="needs CUDA"):
        flux.resolve("default", False, [4224], [])
