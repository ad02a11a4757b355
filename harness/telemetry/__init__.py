"""Telemetry: NVML sampling, NVTX ranges, Prometheus scraping, /proc accounting (process CPU, socket queues); each degrades to nothing without its backend."""
