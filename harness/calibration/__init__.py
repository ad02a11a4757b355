"""Calibration: fit the model's constants from stored microbenchmark runs into a calibration record.

runs.py gathers one machine's runs (refusing mixed key facts); fit.py fits the constants with
bootstrap intervals; record.py holds the typed result; file.py stores it as versioned JSON;
apply.py hands the constants to the model (`harness model plan --calibration FILE`);
synthetic.py writes runs from known constants, for tests and fixtures; kernel_grid.py reads an imported
kernel grid (aiconfigurator's database) at a model's shapes; gpu_db.py is the GPU calibration database
that ships with the project (calibration/gpus/: `pick`, `file_entry`, `uncalibrated_label`).
"""
