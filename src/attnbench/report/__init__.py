"""Presenting: tables, figures and sentences of the reports, from result rows alone (no torch)."""
