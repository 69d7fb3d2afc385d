"""The measuring side of the attention-masks report (notebooks/attention_masks.md): MagiAttention's
kernel benchmark, six mask types from 4k to 128k tokens at GQA 64:8.

profiles         the sweep's profiles as data (masks, lengths, provider tiers, time budgets)
documents        the document lengths of the varlen masks, drawn once per length
series           one provider × mask × pass over growing lengths (oom, refusals, skipped-for-time rows)
measure          a measuring cell's stage: the checks, then the timed series
"""
