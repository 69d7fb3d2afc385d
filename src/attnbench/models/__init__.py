"""Small models used by the profile notebooks.

transformer   the CS336 decoder-only Transformer LM (RMSNorm, SwiGLU, RoPE, pre-norm blocks), its five
              sizes, its parameter count and FLOPs per step.
attention     the attention the model calls, by name: eager (the textbook softmax(QKᵀ/√d)V), sdpa
              (PyTorch's fused scaled_dot_product_attention) or triton (our FlashAttention-2).
"""
