"""The measuring side of the dilated-attention report (notebooks/dilated_attention.md).

profiles.py     smoke | default | full
measure.py      one Result row of an implementation on one device (correctness, timing, exact FLOPs)
scaling.py      the length sweep with its stop rules (time budget, out of memory), dense baselines
checks.py       correctness rows of every implementation x backend, the reference's own check,
                the kernel-only share of the gather path's time
distributed.py  the sequence-parallel version on N GPUs: correctness against one process, timing,
                scaling efficiency
"""
