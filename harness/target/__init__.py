"""The embedded default target: an OpenAI-compatible streaming server emulating a scenario's deployment (simulated).

Run it with `python -m harness.target --scenario workloads/scenarios/ch9-hetero-pd.toml`; start and
stop it from code with harness.target.process.start_target. Importing this package stays light:
aiohttp is imported only by harness.target.server.
"""
