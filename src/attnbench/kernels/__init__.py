"""Our own attention kernels (Triton), each readable top to bottom with its math in a docstring.

flash_attention2   FlashAttention-2 forward and backward (causal and full, GQA, bf16/fp16/fp32, head dims
                   16..128), an autograd Function returning the output and the log-sum-exp.
dilated_attention  LongNet's dilated attention fused: each branch read in place (strided descriptors), merged
                   by log-sum-exp into one fp32 accumulator; forward, backward, autograd Function, memory model.

Importing this package imports nothing heavy; import the kernel module you need.
"""
