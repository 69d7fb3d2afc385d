"""Measuring attention: timing (timing.py), FLOPs/MFU (flops.py), masks (masks.py), the fp32 reference
(correctness.py), the environment (env.py), result rows (results.py), providers (providers/) and the
sweep that ties them together (sweep.py).

Nothing is imported here, so `attnbench.bench.env` and `attnbench.bench.results` work without torch.
"""
