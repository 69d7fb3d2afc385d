"""Which global sequence positions each rank holds, and shard/unshard along the sequence dim.

One family covers every strategy: `ring_degree` R ring positions each own a segment of the sequence,
split contiguously over `ulysses_degree` U consecutive ranks (rank = ring_index * U + ulysses_index).
  R == 1 (contiguous; ring, Ulysses): one segment = the whole sequence, rank r gets [r*S/P, (r+1)*S/P).
  R > 1 (zigzag; U == 1 for zigzag/double ring/burst/all-gather/torch_cp, U > 1 for USP): the sequence
    is cut into 2R chunks and ring index i's segment is chunks i and 2R-1-i, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Layout:
    ulysses_degree: int
    ring_degree: int

    @classmethod
    def named(cls, kind: str, world: int, ulysses_degree: int | None = None) -> Layout:
        if kind == "contiguous":
            return cls(world, 1)
        if kind == "zigzag":
            return cls(1, world)
        if kind == "usp":
            if not ulysses_degree or world % ulysses_degree:
                raise ValueError(f"usp layout: ulysses_degree={ulysses_degree} must divide world={world}")
            return cls(ulysses_degree, world // ulysses_degree)
        raise ValueError(f"unknown layout {kind!r}; choose contiguous, zigzag or usp")

    @property
    def world(self) -> int:
        return self.ulysses_degree * self.ring_degree

    @property
    def kind(self) -> str:
        return "contiguous" if self.ring_degree == 1 else "zigzag" if self.ulysses_degree == 1 else "usp"

    def check(self, seq_len: int) -> None:
        need = self.world if self.ring_degree == 1 else 2 * self.world
        if seq_len % need:
            raise ValueError(
                f"{self.kind} layout over {self.world} ranks needs the total sequence length "
                f"divisible by {need}, got {seq_len}"
            )

    def indices(self, seq_len: int, rank: int) -> torch.Tensor:
        """Global positions held by `rank`, in its local order."""
        self.check(seq_len)
        ring_index, ulysses_index = divmod(rank, self.ulysses_degree)
        if self.ring_degree == 1:
            segment = torch.arange(seq_len)
        else:
            chunk = seq_len // (2 * self.ring_degree)
            first = ring_index * chunk
            last = (2 * self.ring_degree - 1 - ring_index) * chunk
            segment = torch.cat([torch.arange(first, first + chunk), torch.arange(last, last + chunk)])
        part = segment.numel() // self.ulysses_degree
        return segment[ulysses_index * part : (ulysses_index + 1) * part]

    def shard(self, x: torch.Tensor, rank: int, dim: int = 2) -> torch.Tensor:
        """This rank's shard of the global tensor `x` (a copy)."""
        return x.index_select(dim, self.indices(x.shape[dim], rank).to(x.device))

    def unshard(self, shards: list[torch.Tensor], dim: int = 2) -> torch.Tensor:
        """The global tensor from every rank's shard (list in rank order)."""
        if len(shards) != self.world:
            raise ValueError(f"expected {self.world} shards, got {len(shards)}")
        seq_len = sum(s.shape[dim] for s in shards)
        shape = list(shards[0].shape)
        shape[dim] = seq_len
        out = shards[0].new_empty(shape)
        for rank, s in enumerate(shards):
            out.index_copy_(dim, self.indices(seq_len, rank).to(s.device), s)
        return out
