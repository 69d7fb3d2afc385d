"""The comparison page's "fastest per shape" never picks a quantised row (as the headline ranks them apart)."""

from attnbench.notebook.compare import _bests, _key


def _row(provider, ms, quantized=False):
    return {
        "provider": provider,
        "pass": "fwd",
        "status": "ok",
        "ms_median": ms,
        "tflops": 1.0 / ms,
        "extra": {"quantized": True} if quantized else {},
        "batch": 1,
        "seqlen_q": 4352,
        "seqlen_k": 4352,
        "heads_q": 24,
        "heads_kv": 24,
        "head_dim": 128,
        "dtype": "bfloat16",
        "mask": "full",
    }


def test_fastest_per_shape_skips_quantised_rows():
    rows = {
        label: {_key(r): r for r in (_row("fp8", fp8_ms, quantized=True), _row("fa3", fa3_ms))}
        for label, fp8_ms, fa3_ms in (("a", 0.2, 0.35), ("b", 0.21, 0.34))
    }
    fields = ["seqlen_q", "heads_q", "heads_kv", "mask"]
    (line,) = _bests(["a", "b"], "a", ["b"], rows, fields)
    assert [cell["provider"] for cell in line["cells"]] == ["fa3", "fa3"]
