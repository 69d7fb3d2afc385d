"""The measuring side of the context-parallel report (notebooks/context_parallel.md): the harness that
times and checks the strategies of attnbench.cp across ranks.

profiles         the sweep's profiles as data (lengths, heads, strategies, kernels, counts)
measure          one timed row: rehearsal, warm-up to steady state, timed calls on every rank, the slowest rank
sweep            the strategies × lengths × passes sweep and its rows
verify           correctness against single-GPU attention at the timed head count
overlap          the per-rank compute/communication breakdown
"""
