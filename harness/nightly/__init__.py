"""The nightly hardware run: micro suites, calibration and report, appended to a history; drift detection.

constants.py turns a micro run (and a calibration record) into named constants; history.py stores
them as a parquet dataset partitioned by machine and date; drift.py compares the newest value of
each constant with a rolling robust baseline; report.py draws the trends; pipeline.py runs it all.
"""
