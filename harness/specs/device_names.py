"""Exact device names (as torch.cuda.get_device_name and NVML report them) -> GPU spec catalog names.

Exact product names only, never substrings: "NVIDIA H100 PCIe" and "NVIDIA H100 NVL" are not the
SXM part, and an A100 40 GB is not the 80 GB one (1555 vs 2039 GB/s). A name not listed has no
spec: its efficiencies stay empty and the caller says how to add one.
"""

from __future__ import annotations

# name as the driver reports it -> harness/specs/gpus.py name
DEVICE_NAME_TO_SPEC: dict[str, str] = {
    "NVIDIA H200": "h200-sxm",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H20": "h20-96gb",
    "NVIDIA A100-SXM4-80GB": "a100-80gb-sxm",
    "NVIDIA A100-PCIE-40GB": "a100-40gb-pcie",
    "NVIDIA B200": "b200",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
    # the parts a substring match used to mis-map (their specs in gpus.py; SM/memory facts in microbench/gpu_identity.py)
    "NVIDIA A100-SXM4-40GB": "a100-40gb-sxm",
    "NVIDIA A100 80GB PCIe": "a100-80gb-pcie",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200 NVL": "h200-nvl",
}


def spec_name_for_device(device_name: str | None) -> str | None:
    """The catalog name of a device by its exact reported name (surrounding blanks ignored), or None."""
    if not device_name:
        return None
    return DEVICE_NAME_TO_SPEC.get(" ".join(device_name.split()))


# hardware generation of each catalog device: "device family" (the kind of kernel a constant was measured
# with is its "kernel family", a different notion). Constants measured on one family are not applied to
# another unless the user says so (--proxy GPU=DEVICE).
DEVICE_FAMILY: dict[str, str] = {
    "cpu": "cpu",
    "a100-80gb-sxm": "ampere",
    "a100-40gb-pcie": "ampere",
    "a100-40gb-sxm": "ampere",
    "a100-80gb-pcie": "ampere",
    "h100-pcie": "hopper",
    "h100-nvl": "hopper",
    "h200-nvl": "hopper",
    "h100-sxm": "hopper",
    "h200-sxm": "hopper",
    "h20-96gb": "hopper",
    "b200": "blackwell",
    "rtx-pro-6000": "blackwell",
}


def device_family(device: str | None) -> str | None:
    """"cpu", "ampere", "hopper", "blackwell" for a catalog device (or "cpu"), else None (unknown: never a proxy)."""
    return DEVICE_FAMILY.get(device or "")
