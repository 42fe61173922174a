"""Benchmarks of the harness itself (run as scripts; a package so rank functions import by name)."""
