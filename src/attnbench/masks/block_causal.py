"""block_causal: `doc_lens` are blocks of one sequence; full attention inside a block and to every
earlier block."""

from attnbench.masks.base import Mask
from attnbench.masks.mods import block_causal, doc_ids_from_lens


def _count(w) -> int:
    total, end = 0, 0
    for n in w.doc_lens:
        end += n
        total += n * end
    return total


MASK = Mask(
    "block_causal",
    "`doc_lens` are blocks of one sequence: full attention inside a block and to every earlier block",
    build=lambda w, device: block_causal(doc_ids_from_lens(w.doc_lens, device)),
    count=_count,
    needs=("doc_lens",),
    requires=("block_causal",),
)
