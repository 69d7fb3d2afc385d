"""Measuring attention: timing (timing.py; the clock it ran at: clocks.py), FLOPs/MFU and peaks (flops.py), masks, the fp32 reference
(correctness.py), the environment (env.py), providers (providers/), the sweep that ties them together
(sweep.py), and what several studies share: profile resolution and the resolved profile.json
(profiles.py), agreement and timing across ranks (distributed.py). Row types and their JSONL files are
`attnbench.rows`.

Nothing is imported here, so env, profiles and the rows work without torch.
"""
