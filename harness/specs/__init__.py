"""Hardware, model and scenario specs: frozen, validated, each number with its source."""

from harness.specs.gpus import GPUS, GpuSpec, get_gpu
from harness.specs.links import LINKS, LinkSpec, get_link
from harness.specs.models import MODELS, ModelSpec, get_model, model_from_hf_config

__all__ = [
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
