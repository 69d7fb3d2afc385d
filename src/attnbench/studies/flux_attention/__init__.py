"""The measuring side of the Flux attention report (notebooks/flux_attention.md).

profiles.py  smoke | default | full, and the resolved config the gpu cell writes (profile.json)
measure.py   the environment listing, the provider sweep at Flux's shapes, the trust check of the timer,
             and cuDNN at NVIDIA's published H200 configuration
"""
