"""varlen_full: documents packed into one sequence, full attention inside a document, none across."""

from attnbench.masks.base import Mask, Native
from attnbench.masks.mods import doc_ids_from_lens, document

MASK = Mask(
    "varlen_full",
    "documents packed into one sequence: full attention inside a document, none across",
    build=lambda w, device: document(doc_ids_from_lens(w.doc_lens, device)),
    count=lambda w: sum(n * n for n in w.doc_lens),
    native=lambda w: Native(doc_lens=tuple(w.doc_lens)),
    needs=("doc_lens",),
    requires=("documents",),
    label="varlen full",
)
