"""Which GPU product a CUDA device is, and so which spec peaks it is judged against; refuse to guess.

A device is matched by its exact product name as `torch.cuda.get_device_name()` (and `nvidia-smi`)
print it (the table is harness/specs/device_names.py; the vendor prefix "NVIDIA " or, from older
drivers, "Tesla " is not part of the match), then cross-checked against what the
device reports: its multiprocessor count and its memory size. A name that is not in the table, or
a device whose SM count or memory disagrees with its name (a MIG slice, a cut-down part, a new
SKU under an old name), gets no spec: its MFU/MBU stay empty, with a reason naming the device and
how to add it. Substring matching is what this replaces: "A100" matched the 40 GB SXM part to the
80 GB spec (2039 vs 1555 GB/s) and "H100" matched the PCIe and NVL parts to the SXM spec.

Memory is checked in GiB against the product's marketed capacity (which is close to GiB: an
"80GB" part reports ~79.2 GiB, an H200 "141GB" 140.4 GiB): the device must report between
MEMORY_LOW and MEMORY_HIGH of it.

Sources for SM counts and capacities: the NVIDIA datasheets / architecture whitepapers of each
part; the name strings are as torch and nvidia-smi print them (seen in public logs: "NVIDIA
H100 80GB HBM3", "NVIDIA H200 NVL" with 143771 MiB, "NVIDIA A100-SXM4-40GB", ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.specs.device_names import DEVICE_NAME_TO_SPEC
from harness.specs.gpus import GPUS

MEMORY_LOW, MEMORY_HIGH = 0.90, 1.03
VENDOR_PREFIXES = ("NVIDIA ", "Tesla ")


@dataclass(frozen=True, slots=True)
class GpuProduct:
    device_name: str  # as printed, without the vendor prefix: "H100 80GB HBM3"
    spec: str  # harness/specs/gpus.py name
    sm_count: int
    memory_gib: float  # marketed capacity, ~GiB
    form_factor: str  # "SXM" | "PCIe" | "NVL (PCIe)" | ...


# what each catalog GPU must report (the name -> spec table itself is harness/specs/device_names.py)
PRODUCT_FACTS: dict[str, tuple[int, float, str]] = {
    "a100-40gb-sxm": (108, 40, "SXM"),
    "a100-80gb-sxm": (108, 80, "SXM"),
    "a100-40gb-pcie": (108, 40, "PCIe"),
    "a100-80gb-pcie": (108, 80, "PCIe"),
    "h100-sxm": (132, 80, "SXM"),
    "h100-pcie": (114, 80, "PCIe"),
    "h100-nvl": (132, 94, "NVL (PCIe)"),
    "h200-sxm": (132, 141, "SXM"),
    "h200-nvl": (132, 141, "NVL (PCIe)"),
    "h20-96gb": (78, 96, "SXM"),
    "b200": (148, 180, "SXM"),
    "rtx-pro-6000": (188, 96, "PCIe"),
}


def _products() -> tuple[GpuProduct, ...]:
    out = []
    for name, spec in DEVICE_NAME_TO_SPEC.items():
        sm, mem, ff = PRODUCT_FACTS.get(spec, (0, 0.0, "?"))
        out.append(GpuProduct(product_name(name), spec, sm, mem, ff))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    device_name: str
    product: GpuProduct | None
    spec: Any  # harness.specs.gpus.GpuSpec, or None
    reason: str  # why there is no spec, or what matched

    @property
    def known(self) -> bool:
        return self.spec is not None


def product_name(device_name: str) -> str:
    name = " ".join(device_name.split())
    for p in VENDOR_PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return name


def find_product(device_name: str) -> GpuProduct | None:
    """The product whose name equals the device's exactly (vendor prefix and case aside), or None."""
    want = product_name(device_name).lower()
    return next((p for p in _products() if p.device_name.lower() == want), None)


def _how_to_add(device_name: str, sm: int | None, mem: float | None) -> str:
    seen = []
    if sm:
        seen.append(f"{sm} SMs")
    if mem:
        seen.append(f"{mem / 2**30:.1f} GiB")
    seen_s = f" ({', '.join(seen)})" if seen else ""
    return (f"to judge it against a spec, add a GpuSpec with its datasheet peaks to harness/specs/gpus.py and a "
            f"line 'NVIDIA {product_name(device_name)}': '<spec name>' to harness/specs/device_names.py and its "
            f"(sm_count, memory_gib, form factor) to microbench/gpu_identity.PRODUCT_FACTS{seen_s}")


def identify(device_name: str, sm_count: int | None = None, memory_bytes: float | None = None) -> GpuIdentity:
    """Match by exact name, then check SM count and memory; never fall back to a similar name."""
    p = find_product(device_name)
    if p is None:
        return GpuIdentity(device_name, None, None,
                           f"GPU {device_name!r} is not in the product table; no spec peak is applied (no guess from a similar name); "
                           + _how_to_add(device_name, sm_count, memory_bytes))
    problems = []
    if sm_count is not None and sm_count != p.sm_count:
        problems.append(f"it reports {sm_count} SMs where a {p.device_name} has {p.sm_count}")
    if memory_bytes is not None:
        gib = memory_bytes / 2**30
        if not (MEMORY_LOW * p.memory_gib <= gib <= MEMORY_HIGH * p.memory_gib):
            problems.append(f"it reports {gib:.1f} GiB where a {p.device_name} has ~{p.memory_gib:g} GiB (a MIG slice or another SKU?)")
    if problems:
        return GpuIdentity(device_name, p, None,
                           f"GPU {device_name!r} does not look like a {p.device_name}: {'; '.join(problems)}; no spec peak is applied; "
                           + _how_to_add(device_name, sm_count, memory_bytes))
    if p.spec not in PRODUCT_FACTS:
        return GpuIdentity(device_name, p, None,
                           f"GPU {device_name!r} maps to spec {p.spec!r}, but microbench/gpu_identity.PRODUCT_FACTS has no SM count "
                           "and memory for it to check against; no spec peak is applied; " + _how_to_add(device_name, sm_count, memory_bytes))
    if p.spec not in GPUS:
        return GpuIdentity(device_name, p, None,
                           f"GPU {device_name!r} is a {p.device_name} ({p.form_factor}) but harness/specs/gpus.py has no spec "
                           f"{p.spec!r}; no spec peak is applied; " + _how_to_add(device_name, sm_count, memory_bytes))
    checked = [x for x, v in (("SM count", sm_count), ("memory", memory_bytes)) if v is not None]
    return GpuIdentity(device_name, p, GPUS[p.spec],
                       f"{device_name!r} = {p.device_name} ({p.form_factor}) -> spec {p.spec}"
                       + (f"; {' and '.join(checked)} checked" if checked else "; SM count and memory not checked"))


def identify_torch_device(torch: Any, index: int) -> GpuIdentity:
    props = torch.cuda.get_device_properties(index)
    return identify(torch.cuda.get_device_name(index), int(props.multi_processor_count), float(props.total_memory))
