"""What bench-pd adds to a load run beyond the requests (issue 49): GPU telemetry sources, an engine profile window and
the over-saturation cut, as the LoadConfig fields the load process acts on.

The code is workloads.extras_options, shared with the loops and plain Locust; bench-pd's names are kept here.
"""

from __future__ import annotations

from workloads.extras_options import GPU_NVML_MODES, check_exporters, load_config_fields, parse_gpu_metrics_url

__all__ = ["GPU_NVML_MODES", "check_exporters", "load_config_fields", "parse_gpu_metrics_url"]
