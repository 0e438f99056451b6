"""Benchmarks run by `make bench`; each module writes its figures into BENCHMARKS.md."""
