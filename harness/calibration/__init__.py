"""Calibration: fit the model's constants from stored microbenchmark runs into a calibration record.

runs.py gathers one machine's runs (refusing mixed key facts); fit.py fits the constants with
bootstrap intervals; record.py holds the typed result; file.py stores it as versioned JSON;
apply.py hands the constants to the model (`harness model plan --calibration FILE`);
synthetic.py writes runs from known constants, for tests and fixtures.
"""
