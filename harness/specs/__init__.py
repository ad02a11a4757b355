"""Hardware, model and scenario specs: frozen, validated, each number with its source."""

from harness.specs.cpus import CPUS, CpuSpec, get_cpu
from harness.specs.gpus import GPUS, GpuSpec, get_gpu
from harness.specs.links import LINKS, LinkSpec, get_link
from harness.specs.models import MODELS, ModelSpec, get_model, model_from_hf_config
from harness.specs.storage import SSDS, SsdSpec, get_ssd

__all__ = [
    "CPUS",
    "CpuSpec",
    "get_cpu",
    "SSDS",
    "SsdSpec",
    "get_ssd",
    "GPUS",
    "GpuSpec",
    "get_gpu",
    "LINKS",
    "LinkSpec",
    "get_link",
    "MODELS",
    "ModelSpec",
    "get_model",
    "model_from_hf_config",
]
