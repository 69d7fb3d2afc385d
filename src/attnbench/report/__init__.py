"""Presenting: tables, figures, published comparisons and targets, computed from result rows alone.

Measuring cells never import this package, so editing a figure or a table never makes a GPU
measurement stale (a cell's cache key hashes only the attnbench modules it imports).
"""
