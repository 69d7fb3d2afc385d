"""varlen_block_causal: documents of blocks; a query sees every key of its own block and of the earlier
blocks of its document, nothing across documents.

MagiAttention's benchmark defines it as k <= (q // block + 1) * block (positions inside the document),
which lets every block see the first key of the next block as well. We use k < (q // block + 1) * block:
full attention inside a block and to all earlier blocks of the document, nothing later. The pair counts
differ by (blocks - 1) * block per document (< 0.1 % at block 2048), but a block-sparse kernel would
touch one more key tile per block.
"""

from attnbench.masks.base import Mask
from attnbench.masks.mods import (
    and_masks,
    doc_ids_from_lens,
    doc_positions_from_lens,
    document,
    key_limit,
    keys_below,
)


def _build(w, device):
    positions = doc_positions_from_lens(w.doc_lens, device)
    ids = doc_ids_from_lens(w.doc_lens, device)
    return and_masks(document(ids), keys_below(positions, key_limit(positions, w.block)))


def document_pairs(n: int, block: int) -> int:
    """Pairs of one document of n tokens under the in-document block-causal mask: the queries of block
    b (min(block, n - b*block) of them) each see min((b + 1) * block, n) keys."""
    return sum(min(block, n - start) * min(start + block, n) for start in range(0, n, block))


MASK = Mask(
    "varlen_block_causal",
    "documents of blocks: a query sees every key of its own block and of the earlier blocks of "
    "its document (k < (q // block + 1) * block inside the document), nothing across documents",
    build=_build,
    count=lambda w: sum(document_pairs(n, w.block) for n in w.doc_lens),
    needs=("doc_lens", "block"),
    # no flash-style kernel takes a block size: FlexAttention (or a dense mask) runs it
    requires=("documents", "block_causal"),
    label="varlen block causal",
)
