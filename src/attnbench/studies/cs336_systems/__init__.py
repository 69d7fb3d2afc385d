"""The measuring side of the CS336 systems report (notebooks/cs336_systems.md).

profiles         what each profile (smoke | default | full) measures, and its cost on an H200
steps            training steps of the CS336 model timed per phase, warm-up, memory per phase, OOM rows
breakdown        torch.profiler: top kernels per phase, attention vs MLP share
memory           the allocator's memory history over training steps of the largest size that fits
attention_scan   eager and compiled attention over d_model x seq, and the memory model checked against it
kernels          the kernel comparison table, the leaderboard row, the speed target, the tile audit

Rows are plain dicts (JSON lines) or bench Result rows; report/systems.py turns them into tables and
figures without torch. Nothing is imported here.
"""
