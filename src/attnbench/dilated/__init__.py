"""Dilated attention (LongNet): the definition, a dense reference, a gather-based implementation over
fused kernels, FlexAttention, and a sequence-parallel version. See pattern.py for the definition."""
