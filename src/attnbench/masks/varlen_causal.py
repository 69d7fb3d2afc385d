"""varlen_causal: documents packed into one sequence, causal inside a document, none across."""

from attnbench.masks.base import Mask, Native
from attnbench.masks.mods import and_masks, causal, doc_ids_from_lens, document

MASK = Mask(
    "varlen_causal",
    "documents packed into one sequence: causal inside a document, none across",
    build=lambda w, device: and_masks(causal, document(doc_ids_from_lens(w.doc_lens, device))),
    count=lambda w: sum(n * (n + 1) // 2 for n in w.doc_lens),
    native=lambda w: Native(causal=True, doc_lens=tuple(w.doc_lens)),
    needs=("doc_lens",),
    requires=("causal", "documents"),
    label="varlen causal",
)
