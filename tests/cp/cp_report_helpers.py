"""Constants shared by the context-parallel report tests (test_cp_report_tables, test_cp_report_run)."""

GIB = 2**30
