"""The closed loop on a real engine, one module per step: calibrate, predict, measure, compare, render; `run` ties them.

Method and results: docs/loop-cpu.md. Importing this package stays light: torch, the engine and the
load generator are imported only by the steps that use them.
"""
