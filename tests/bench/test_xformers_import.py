"""xFormers beside FlashAttention-4: FA4's `flash_attn` (CuTe only) must not break `import xformers.ops`.

xFormers 0.0.35 runs `if importlib.util.find_spec("flash_attn"): import flash_attn.flash_attn_interface`
at import, unguarded. The fake packages below reproduce exactly that on CPU."""

from __future__ import annotations

import sys
import textwrap

import pytest

from attnbench.bench.providers import xformers as provider

XFORMERS_CHECK = textwrap.dedent("""
    import importlib.util
    FA2 = None
    if importlib.util.find_spec("flash_attn"):
        import flash_attn.flash_attn_interface
        FA2 = flash_attn.flash_attn_interface
""")


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """A site folder with FA4's layout (flash_attn/cute, no FA2 interface) and a fake xformers.ops."""
    (tmp_path / "flash_attn" / "cute").mkdir(parents=True)
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    (tmp_path / "flash_attn" / "cute" / "__init__.py").write_text("")
    (tmp_path / "xformers" / "ops").mkdir(parents=True)
    (tmp_path / "xformers" / "__init__.py").write_text("")
    (tmp_path / "xformers" / "ops" / "__init__.py").write_text(XFORMERS_CHECK)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] in ("flash_attn", "xformers")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in ("flash_attn", "xformers")]:
        del sys.modules[name]


def test_fa4_package_breaks_the_plain_import(fake_packages):
    with pytest.raises(ModuleNotFoundError, match="flash_attn.flash_attn_interface"):
        import xformers.ops  # noqa: F401


def test_import_xformers_hides_fa4_and_restores_it(fake_packages):
    import flash_attn.cute  # noqa: F401 - FA4 imported earlier in the process (its provider ran first)

    fa4 = sys.modules["flash_attn"]
    assert provider.flash_attn_without_fa2()
    provider.import_xformers()
    assert sys.modules["xformers.ops"].FA2 is None  # xFormers fell back to PyTorch's flash kernels
    assert sys.modules["flash_attn"] is fa4  # FA4 is back for its own provider


def test_import_xformers_leaves_no_entry_when_fa4_was_not_imported(fake_packages):
    provider.import_xformers()
    assert "flash_attn" not in sys.modules
    import flash_attn.cute  # noqa: F401  - still importable afterwards


def test_fa2_interface_is_not_hidden(fake_packages):
    (fake_packages / "flash_attn" / "flash_attn_interface.py").write_text("")
    assert not provider.flash_attn_without_fa2()
    provider.import_xformers()
    assert sys.modules["xformers.ops"].FA2 is not None  # a real FA2 stays xFormers' choice


def test_the_reason_xformers_cannot_load_is_its_own_not_the_fa4_clash(fake_packages):
    """xFormers fails to load for its own reason (CUDA 12's runtime missing) beside FA4: the provider's
    reason names that cause and what to do, not the flash_attn_interface error a plain import would hit."""
    (fake_packages / "xformers" / "ops" / "__init__.py").write_text(
        XFORMERS_CHECK + "raise OSError('libcudart.so.12: cannot open shared object file')\n"
    )
    said = provider.XFormers("xformers").unavailable()
    assert said.startswith("import failed: OSError: libcudart.so.12: cannot open shared object file")
    assert provider.CUDA12_HINT in said and "flash_attn_interface" not in said
