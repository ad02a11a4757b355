"""Telemetry: NVML sampling, NVTX ranges, Prometheus scraping; each degrades to nothing without its backend."""
