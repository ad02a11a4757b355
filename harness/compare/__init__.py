"""Comparing runs: per-metric deltas with bootstrap intervals and a rank test, verdicts and CI gates.

runs.py turns a stored run into metric samples; pairing.py decides which runs may be compared
(same workload artifact and scenario); stats.py holds the statistics; compare.py compares pairs;
gates.py parses and checks `--fail-on`; engines.py drives one workload against two targets.
"""
