"""Benchmarks that print their figures; run from the repository root."""
