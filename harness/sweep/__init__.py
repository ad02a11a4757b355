"""SLO-driven tuning by search (Chapter 19, §19.7 reward, §19.11 chunked prefill): `harness sweep`.

grid.py parses the settings grid, score.py holds the reward, goodput and Pareto front (pure),
run.py runs one workload per setting against an engine or the embedded target and stores a sweep run.
"""
