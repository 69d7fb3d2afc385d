"""Tile configurations: the candidates the autotuner times, and the rule that picks them per problem.

A forward tile is (BLOCK_M query rows, BLOCK_N key rows, warps, pipeline stages, warp specialisation);
a backward tile is (BLOCK_M1, BLOCK_N1) for the dK/dV loop, (BLOCK_M2, BLOCK_N2) for the dQ loop, warps
and stages. Why these candidates (Hopper, H100/H200):

- 16-bit inputs: 128-row query blocks (one 4-warp warpgroup per 64 rows of wgmma); 64- or 128-key blocks;
  2-4 stages of TMA prefetch within ~227 KB of shared memory. 8 warps for 128x128 score tiles (the
  fp32 scores of one warpgroup alone would need 128 registers per thread), 4 otherwise.
- Warp specialisation (`tl.range(..., warp_specialize=True)`: a producer warp issues the TMA loads,
  consumer warpgroups do the math) takes effect on Hopper with 4 warps in Triton 3.6, and only on a
  kernel whose one loop holds every dot, with no branch inside (the compiler's Hopper pass fails on a
  second loop or a dot outside it, and silently skips a loop with an `if`). Such tiles run one loop over
  every key block with the mask applied on each (forward.py): no diagonal split, but loads overlap
  the math. Whether that wins is measured: the autotuner times both kinds.
- fp32 inputs (TF32 tensor cores) take twice the shared memory per element: smaller tiles.
- Causal tiles need BLOCK_M to be a multiple of BLOCK_N (the diagonal stage is whole key blocks), and the
  dQ kernel BLOCK_M2 % BLOCK_N2 == 0 for the same reason; the dK/dV kernel takes either ratio (its diagonal
  stage spans max(BLOCK_M1, BLOCK_N1) query rows).

`scripts/check_triton_fa2_sm90.py` compiles every candidate for sm_90 on a CPU (no GPU needed) and prints
registers, spills and shared memory, so a candidate that cannot fit is caught before a GPU run.
Under the Triton interpreter (CPU) a single small tile is used: autotuning needs CUDA events.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import triton


@dataclass(frozen=True)
class ForwardTile:
    block_m: int
    block_n: int
    warps: int
    stages: int
    warp_specialize: bool = False
    persistent: int = 0  # > 0: that many programs per SM, each taking query blocks in turn (forward.py)

    def meta(self) -> dict:
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "WARP_SPECIALIZE": self.warp_specialize,
                "PERSISTENT": self.persistent}  # fmt: skip

    def config(self) -> triton.Config:
        return triton.Config(self.meta(), num_warps=self.warps, num_stages=self.stages)

    def label(self) -> str:
        ws = " ws" if self.warp_specialize else ""
        persistent = f" persistent x{self.persistent}" if self.persistent else ""
        return f"fwd {self.block_m}x{self.block_n} w{self.warps} s{self.stages}{ws}{persistent}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BackwardTile:
    """(BLOCK_M1, BLOCK_N1, warps, stages) for the dK/dV kernel; (BLOCK_M2, BLOCK_N2, dq_warps, dq_stages)
    for the dQ kernel (0: the dK/dV kernel's warps / stages)."""

    block_m1: int
    block_n1: int
    block_m2: int
    block_n2: int
    warps: int
    stages: int
    dq_warps: int = 0
    dq_stages: int = 0

    def meta(self) -> dict:
        return {**self.dkdv_meta(), **self.dq_meta()}

    def dkdv_meta(self) -> dict:
        return {"BLOCK_M1": self.block_m1, "BLOCK_N1": self.block_n1}

    def dq_meta(self) -> dict:
        return {"BLOCK_M2": self.block_m2, "BLOCK_N2": self.block_n2}

    @property
    def dq_launch(self) -> tuple[int, int]:
        """(warps, stages) of the dQ kernel."""
        return self.dq_warps or self.warps, self.dq_stages or self.stages

    def dkdv_config(self) -> triton.Config:
        return triton.Config(self.dkdv_meta(), num_warps=self.warps, num_stages=self.stages)

    def dq_config(self) -> triton.Config:
        warps, stages = self.dq_launch
        return triton.Config(self.dq_meta(), num_warps=warps, num_stages=stages)

    def label(self) -> str:
        warps, stages = self.dq_launch
        return (
            f"bwd dkdv {self.block_m1}x{self.block_n1} w{self.warps} s{self.stages} "
            f"dq {self.block_m2}x{self.block_n2} w{warps} s{stages}"
        )

    def to_dict(self) -> dict:
        return asdict(self)


# keyed by (bytes per element, padded head dim <= 64 ? "small" : "large")
FORWARD_TILES: dict[tuple[int, str], list[ForwardTile]] = {
    (2, "small"): [  # H100 causal d64 16k: 64x64 w4 s2 1.31 ms, 128x64 w4 s3 1.42, 128x128 w8 s3 1.51
        ForwardTile(64, 64, 4, 2),
        ForwardTile(128, 64, 4, 3),
        ForwardTile(128, 128, 8, 3),
        ForwardTile(128, 64, 4, 4),
        ForwardTile(64, 64, 4, 3),
        ForwardTile(128, 64, 4, 3, warp_specialize=True),
        ForwardTile(128, 128, 4, 2, warp_specialize=True),
        # not timed yet (added 2026-11-26; the H200 picked 64x64 w4 s2 at 1.30 ms against FA3's 0.96): 128-row
        # blocks over two warpgroups (110 registers, no spill on sm_90, where 4 warps take ~190) and deeper pipelines
        ForwardTile(128, 64, 8, 3),
        ForwardTile(128, 64, 8, 4),
        ForwardTile(128, 128, 8, 4),
        ForwardTile(64, 64, 4, 4),
        # not timed yet (2026-11-27): persistent forms of the H200's and H100's picks, 2 programs per SM
        # (64x64 w4 s2 takes 41 KB of shared memory and 107 registers a thread: several fit an SM)
        ForwardTile(64, 64, 4, 2, persistent=2),
        ForwardTile(128, 64, 8, 3, persistent=1),
    ],
    (2, "large"): [  # H100 causal d128 16k: 128x128 w8 s3 2.11 ms, 128x64 w8 s3 2.29, 128x128 w8 s2 2.42
        ForwardTile(128, 128, 8, 3),
        ForwardTile(128, 64, 4, 3),
        ForwardTile(128, 64, 8, 3),
        ForwardTile(128, 128, 8, 2),
        ForwardTile(128, 128, 4, 2, warp_specialize=True),
        ForwardTile(128, 64, 4, 3, warp_specialize=True),
        ForwardTile(128, 64, 8, 4),  # not timed yet (161 KB of shared memory; 128x128 s4 would need 289)
        ForwardTile(
            128, 128, 8, 2, persistent=1
        ),  # not timed yet (2026-11-27): persistent (s3: 257 KB of shared memory)
    ],
    (4, "small"): [ForwardTile(64, 64, 4, 3), ForwardTile(128, 64, 8, 2), ForwardTile(64, 32, 4, 3)],
    (4, "large"): [ForwardTile(64, 64, 4, 2), ForwardTile(64, 32, 4, 3), ForwardTile(128, 32, 8, 2)],
}
# Backward candidates: (dK/dV tile, warps, stages) + (dQ tile, warps, stages), two kernels. The dK/dV
# kernel keeps two fp32 accumulators of BLOCK_N1 x head_dim live, so the register file is its limit
# (8 warps for 128 keys); the dQ kernel keeps one, so it takes 128-row query blocks and 64-key blocks.
BACKWARD_TILES: dict[tuple[int, str], list[BackwardTile]] = {
    # H100, causal d64 16k x 16 heads (ms of the kernel alone): dK/dV 128x64 w4 s2 2.22 (s1 2.72, s3 3.26),
    # 64x64 w4 s2 2.45, 32x64 w4 s4 2.45, 64x128 w8 3.58, 128x64 w8 5.2; dQ 64x64 w4 s2 1.35, 128x64 w8 s3
    # 1.38, 128x128 w8 s3 1.54, 128x32 w8 s3 1.63. Autotuned end to end (H100, commit of this change):
    # forward + backward 5.16 ms (FA3 3.65, cuDNN 4.38 in the same run), was 6.48 with the fused backward.
    (2, "small"): [
        BackwardTile(128, 64, 64, 64, 4, 2, 4, 2),
        BackwardTile(64, 64, 128, 64, 4, 2, 8, 3),
        BackwardTile(32, 64, 64, 64, 4, 4, 4, 3),
    ],
    (2, "large"): [
        BackwardTile(32, 128, 128, 64, 8, 2, 8, 2),
        BackwardTile(16, 128, 128, 32, 8, 2, 8, 2),
        BackwardTile(32, 64, 64, 64, 8, 2, 4, 2),
        BackwardTile(64, 128, 128, 64, 8, 2, 8, 2),
    ],
    (4, "small"): [
        BackwardTile(32, 64, 64, 32, 4, 2),
        BackwardTile(16, 64, 64, 16, 4, 2),
        BackwardTile(32, 32, 32, 32, 4, 2),
    ],
    (4, "large"): [BackwardTile(32, 64, 64, 32, 4, 2), BackwardTile(16, 64, 64, 16, 4, 2)],
}
# The interpreter runs one program after another in numpy, so its speed is set by the number of tile
# operations: small tiles for small problems (several blocks, the causal diagonal stage with BLOCK_M >
# BLOCK_N and partial last blocks are all exercised on test shapes), 64-row tiles from 128 tokens on.
INTERPRETER_SMALL = (ForwardTile(32, 16, 4, 1), BackwardTile(16, 32, 32, 16, 4, 1))
INTERPRETER_LARGE = (ForwardTile(64, 64, 4, 1), BackwardTile(64, 64, 64, 64, 4, 1))


def interpreter_tiles(seqlen_q: int, seqlen_k: int) -> tuple[ForwardTile, BackwardTile]:
    return INTERPRETER_LARGE if min(seqlen_q, seqlen_k) >= 128 else INTERPRETER_SMALL


def size_class(head_dim_pad: int) -> str:
    return "small" if head_dim_pad <= 64 else "large"


def warp_specialization_allowed() -> bool:
    """Warp-specialised tiles are offered to the autotuner only with ATTNBENCH_FA2_WARP_SPECIALIZE=1.

    Off by default because they computed wrong results on an H200 with triton 3.6: the tile audit of
    the leaderboard cell (outputs/cs336_systems/nvidia-h200, commit 002058f) gave rel_l2 0.177 for
    128x128 w4 s2 ws and NaN for 128x64 w4 s3 ws, and the autotuner had picked the first (timing does
    not check results then; checked_tuning.py now rejects a tile whose result is wrong). Audited again at
    77cc7cb (measurements/fa2_warp_specialize_leaderboard-nvidia-h200.log): still wrong, and no faster than
    the plain pick. Set it to 1 to audit them again on a newer Triton."""
    return os.environ.get("ATTNBENCH_FA2_WARP_SPECIALIZE", "0") == "1"


def forward_candidates(element_size: int, head_dim_pad: int, causal: bool) -> list[ForwardTile]:
    """The forward tiles the autotuner may pick for this problem."""
    tiles = FORWARD_TILES[(min(element_size, 4), size_class(head_dim_pad))]
    if causal:
        tiles = [t for t in tiles if t.block_m % t.block_n == 0]
    if not warp_specialization_allowed():
        tiles = [t for t in tiles if not t.warp_specialize]
    return tiles


def backward_candidates(element_size: int, head_dim_pad: int) -> list[BackwardTile]:
    return BACKWARD_TILES[(min(element_size, 4), size_class(head_dim_pad))]


def _all_configs(table: dict) -> list[triton.Config]:
    unique = list(dict.fromkeys(t for tiles in table.values() for t in tiles))
    return [t.config() for t in unique]


def _launch(config: triton.Config) -> tuple:
    """What makes two configs the same launch: meta-parameters, warps, stages."""
    return (tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages)


def _unique(configs: list[triton.Config]) -> list[triton.Config]:
    return list({_launch(c): c for c in configs}.values())


ALL_FORWARD_CONFIGS = _all_configs(FORWARD_TILES)
_ALL_BACKWARD_TILES = list(dict.fromkeys(t for tiles in BACKWARD_TILES.values() for t in tiles))
ALL_DKDV_CONFIGS = _unique([t.dkdv_config() for t in _ALL_BACKWARD_TILES])
ALL_DQ_CONFIGS = _unique([t.dq_config() for t in _ALL_BACKWARD_TILES])


def _forward_tile(config: triton.Config) -> ForwardTile:
    kw = config.kwargs
    return ForwardTile(
        kw["BLOCK_M"], kw["BLOCK_N"], config.num_warps, config.num_stages, kw["WARP_SPECIALIZE"],
        kw["PERSISTENT"],
    )  # fmt: skip


def prune_forward(configs, named_args, **kwargs):
    """Autotuner hook: keep the configs that are candidates for this dtype, head dim and mask."""
    wanted = set(forward_candidates(named_args["Q"].element_size(), kwargs["D_PAD"], kwargs["CAUSAL"]))
    return [c for c in configs if _forward_tile(c) in wanted]


def prune_dkdv(configs, named_args, **kwargs):
    """Autotuner hook, dK/dV kernel: the (BLOCK_M1, BLOCK_N1, warps, stages) of this problem's tiles."""
    tiles = backward_candidates(named_args["Q"].element_size(), kwargs["D_PAD"])
    wanted = {_launch(t.dkdv_config()) for t in tiles}
    return [c for c in configs if _launch(c) in wanted]


def prune_dq(configs, named_args, **kwargs):
    """Autotuner hook, dQ kernel: the (BLOCK_M2, BLOCK_N2, warps, stages) of this problem's tiles."""
    tiles = backward_candidates(named_args["Q"].element_size(), kwargs["D_PAD"])
    wanted = {_launch(t.dq_config()) for t in tiles}
    return [c for c in configs if _launch(c) in wanted]
