"""Mask functions: dense forms, composition, FlexAttention compatibility."""

import pytest
import torch

from attnbench.bench import masks
from attnbench.bench.correctness import reference_attention
from attnbench.bench.results import Workload


def test_causal_offset_is_bottom_right():
    w = Workload(1, 3, 5, 1, 1, 8, mask="causal")
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(masks.dense_mask(w), expected)


def test_sliding_window_includes_diagonal():
    w = Workload(1, 4, 4, 1, 1, 8, mask="sliding_window", window=2)
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(masks.dense_mask(w), expected)


def test_document_and_block_causal():
    doc = Workload(1, 5, 5, 1, 1, 8, mask="document", doc_lens=(2, 3))
    block = Workload(1, 5, 5, 1, 1, 8, mask="block_causal", doc_lens=(2, 3))
    d, b = masks.dense_mask(doc), masks.dense_mask(block)
    assert d[:2, :2].all() and d[2:, 2:].all() and not d[:2, 2:].any() and not d[2:, :2].any()
    assert b[:2, :2].all() and not b[:2, 2:].any() and b[2:, :].all()


def test_and_or_compose():
    ids = masks.doc_ids_from_lens((3, 3))
    both = masks.and_masks(masks.causal, masks.document(ids))
    either = masks.or_masks(masks.causal, masks.document(ids))
    q, kv = torch.arange(6)[:, None], torch.arange(6)[None, :]
    causal, same_doc = q >= kv, ids[q] == ids[kv]
    assert torch.equal(both(0, 0, q, kv), causal & same_doc)
    assert torch.equal(either(0, 0, q, kv), causal | same_doc)
    with pytest.raises(ValueError):
        masks.and_masks()


def test_row_range_is_a_slice_of_the_whole_mask():
    w = Workload(1, 20, 30, 1, 1, 8, mask="sliding_window", window=6)
    assert torch.equal(masks.dense_mask(w, q_start=5, q_end=12), masks.dense_mask(w)[5:12])
    with pytest.raises(ValueError, match="outside"):
        masks.dense_mask(w, q_start=10, q_end=25)


def test_full_mask_has_no_mask_mod_and_huge_masks_are_refused(monkeypatch):
    assert masks.mask_mod(Workload(1, 4, 4, 1, 1, 8)) is None
    monkeypatch.setattr(masks, "DENSE_LIMIT", 100)
    with pytest.raises(ValueError, match="too big"):
        masks.dense_mask(Workload(1, 20, 20, 1, 1, 8))


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="window"):
        masks.sliding_window(0)
    with pytest.raises(ValueError, match="positive"):
        masks.doc_ids_from_lens((3, 0))


@pytest.mark.parametrize(
    "w",
    [
        Workload(1, 32, 48, 2, 1, 16, dtype="float32", mask="causal"),
        Workload(1, 40, 40, 2, 2, 16, dtype="float32", mask="sliding_window", window=7),
        Workload(1, 48, 48, 2, 2, 16, dtype="float32", mask="document", doc_lens=(5, 20, 23)),
    ],
    ids=lambda w: w.mask,
)
def test_mask_mod_drives_flex_attention(w):
    """The same functions work as FlexAttention mask_mods (tensor indices under vmap)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(w.batch, w.heads_q, w.seqlen_q, w.head_dim, generator=gen)
    k = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen)
    v = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen)
    block = create_block_mask(masks.mask_mod(w), None, None, w.seqlen_q, w.seqlen_k, device="cpu")
    out = flex_attention(q, k, v, block_mask=block, enable_gqa=w.gqa)
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, w), atol=1e-5, rtol=1e-5)
