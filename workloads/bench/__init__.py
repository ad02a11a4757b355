"""Benchmarks of the load generator itself (docs/loadgen-speed.md records their results)."""
