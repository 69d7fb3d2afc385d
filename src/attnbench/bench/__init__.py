"""Measuring attention: timing (timing.py; the clock it ran at: clocks.py), FLOPs/MFU and peaks (flops.py),
masks (masks.py), the fp32 reference (correctness.py), the environment (env.py), result rows and their
ranking (results.py), providers (providers/), the sweep that ties them together (sweep.py), and what a
report shows: tables (report.py) and figures (plots.py).

Nothing is imported here, so env, results, report and plots work without torch.
"""
