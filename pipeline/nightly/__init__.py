"""Nightly evaluation jobs: a models × recipes matrix, a results store, regressions, reports."""
