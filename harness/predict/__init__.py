"""`harness predict`: served TTFT/TPOT of a GPU deployment from the engine's twin run in simulated time, and
`harness validate silicon`: the same predictions against real serving measurements."""
