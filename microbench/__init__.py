"""Microbenchmarks: one module per measured thing, one timing core (microbench.timing) they all share."""
