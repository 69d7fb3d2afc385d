"""Mask functions: dense forms, composition, FlexAttention compatibility."""

import itertools

import pytest
import torch

from attnbench import masks
from attnbench.bench.correctness import reference_attention
from attnbench.masks import mods, varlen_block_causal
from attnbench.rows import Workload


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
    both = masks.and_masks(mods.causal, masks.document(ids))
    either = masks.or_masks(mods.causal, masks.document(ids))
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
    monkeypatch.setattr(masks.base, "DENSE_LIMIT", 100)  # where Mask.dense reads it
    with pytest.raises(ValueError, match="too big"):
        masks.dense_mask(Workload(1, 20, 20, 1, 1, 8))


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="window"):
        mods.sliding_window(0)
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


# --- the registry: every entry is checked the same way ----------------------------------------------


def small(name: str, seqlen: int = 96, **overrides) -> Workload:
    """A small workload of a registered mask: window 11, block 16, documents (7, 40, 33, 16)."""
    needs = masks.get(name).needs
    extra = {"window": 11, "block": 16, "doc_lens": (7, 40, 33, 16)}
    kwargs = {key: extra[key] for key in ("window", "block", "doc_lens") if key in needs}
    if "doc_lens" in needs and seqlen != 96:
        kwargs["doc_lens"] = (seqlen // 3, seqlen - seqlen // 3)
    return Workload(1, seqlen, seqlen, 2, 1, 8, "float32", name, **{**kwargs, **overrides})


REGISTERED = list(masks.REGISTRY)


def test_the_report_masks_are_registered_and_aliases_resolve():
    assert {"full", "causal", "sliding_window", "varlen_full", "varlen_causal", "varlen_block_causal"} <= set(
        REGISTERED
    )
    assert masks.get("document") is masks.get("varlen_full") and masks.same("document", "varlen_full")
    w = Workload(1, 10, 10, 1, 1, 8, mask="document", doc_lens=(4, 6))
    assert torch.equal(masks.dense_mask(w), masks.dense_mask(small("varlen_full", 10, doc_lens=(4, 6))))
    with pytest.raises(ValueError, match="not one of"):
        masks.get("diagonal")


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("seqlen", [1, 17, 96])
def test_pair_count_is_the_dense_mask_enumerated(name, seqlen):
    w = (
        small(name, seqlen)
        if seqlen > 2 or "doc_lens" not in masks.get(name).needs
        else small(name, 1, doc_lens=(1,))
    )
    dense = masks.dense_mask(w)
    assert dense.shape == (w.seqlen_q, w.seqlen_k) and dense.dtype == torch.bool
    assert masks.allowed_pairs(w) == int(dense.sum())


@pytest.mark.parametrize(
    "name", [n for n in REGISTERED if not masks.get(n).needs or masks.get(n).needs == ("window",)]
)
@pytest.mark.parametrize(("sq", "sk"), [(20, 33), (33, 20)])
def test_pair_count_with_unequal_lengths(name, sq, sk):
    w = Workload(1, sq, sk, 1, 1, 8, "float32", name, window=7 if "window" in masks.get(name).needs else None)
    assert masks.allowed_pairs(w) == int(masks.dense_mask(w).sum())


@pytest.mark.parametrize("name", REGISTERED)
def test_native_form_is_the_same_mask(name):
    """What a flash-style kernel is told (causal flag, window, documents) describes exactly the dense mask."""
    w = small(name)
    native = masks.native(w)
    if native is None:
        return  # no flash-style kernel expresses it (only FlexAttention and dense masks run it)
    n = w.seqlen_q
    doc = torch.zeros(n, dtype=torch.long)
    if native.doc_lens:
        cu = native.cu_seqlens()
        assert cu[0] == 0 and cu[-1] == n and len(cu) == len(native.doc_lens) + 1
        for i, (a, b) in enumerate(itertools.pairwise(cu)):
            doc[a:b] = i
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    left, right = native.flash_window()
    expected = doc[:, None] == doc[None, :]
    if right >= 0:
        expected &= j <= i + right
    if left >= 0:
        expected &= j >= i - left
    assert torch.equal(masks.dense_mask(w), expected)


def test_varlen_block_causal_sees_its_block_and_earlier_blocks_of_its_document_only():
    """Strict k < (q // block + 1) * block inside each document (not MagiAttention's <=)."""
    w = Workload(1, 7, 7, 1, 1, 8, mask="varlen_block_causal", doc_lens=(5, 2), block=2)
    expected = torch.tensor(
        [
            [1, 1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 0, 1, 1],
            [0, 0, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(masks.dense_mask(w), expected)
    assert varlen_block_causal.document_pairs(5, 2) == 2 * 2 + 2 * 4 + 1 * 5


def test_missing_parameters_are_named():
    with pytest.raises(ValueError, match="block"):
        Workload(1, 8, 8, 1, 1, 8, mask="varlen_block_causal", doc_lens=(8,))
    with pytest.raises(ValueError, match="doc_lens"):
        Workload(1, 8, 8, 1, 1, 8, mask="varlen_causal", doc_lens=(3, 4))
    with pytest.raises(ValueError, match="window"):
        Workload(1, 8, 8, 1, 1, 8, mask="sliding_window")


@pytest.mark.parametrize("name", REGISTERED)
def test_chunked_block_mask_equals_flex_create_block_mask(name, monkeypatch):
    from torch.nn.attention.flex_attention import create_block_mask

    from attnbench.bench.providers import flex

    monkeypatch.setattr(flex, "CHUNK_ELEMENTS", 16 * 16 * 7)  # several chunks of query blocks
    w = small(name, 100)
    ours = flex.block_mask(w, "cpu", block=16)
    mod = masks.mask_mod(w)
    if mod is None:
        assert ours is None
        return
    theirs = create_block_mask(mod, None, None, w.seqlen_q, w.seqlen_k, device="cpu", BLOCK_SIZE=16)
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    for attr in ("kv_num_blocks", "full_kv_num_blocks"):
        assert torch.equal(getattr(ours, attr).flatten(), getattr(theirs, attr).flatten())


@pytest.mark.parametrize("name", REGISTERED)
def test_flex_with_the_registry_block_mask_matches_the_reference(name):
    from torch.nn.attention.flex_attention import flex_attention

    from attnbench.bench.providers.flex import block_mask

    w = small(name, 100)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 100, 8, generator=gen)
    k, v = (torch.randn(1, 1, 100, 8, generator=gen) for _ in range(2))
    out = flex_attention(q, k, v, block_mask=block_mask(w, "cpu", block=16), enable_gqa=True)
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, w), atol=1e-5, rtol=1e-5)
