"""Which GPU product a CUDA device is, and so which spec peaks it is judged against; refuse to guess.

A device is matched by its exact product name as `torch.cuda.get_device_name()` (and `nvidia-smi`)
print it, with the "NVIDIA " / "Tesla " vendor prefix removed, then cross-checked against what the
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

MEMORY_LOW, MEMORY_HIGH = 0.90, 1.03
VENDOR_PREFIXES = ("NVIDIA ", "Tesla ")


@dataclass(frozen=True, slots=True)
class GpuProduct:
    device_name: str  # as printed, without the vendor prefix: "H100 80GB HBM3"
    spec: str | None  # harness/specs/gpus.py slug, None while the catalog has no entry
    sm_count: int
    memory_gib: float  # marketed capacity, ~GiB
    form_factor: str  # "SXM" | "PCIe" | "NVL (PCIe)" | ...


PRODUCTS: tuple[GpuProduct, ...] = (
    GpuProduct("A100-SXM4-40GB", "a100-40gb-sxm", 108, 40, "SXM"),
    GpuProduct("A100-SXM4-80GB", "a100-80gb-sxm", 108, 80, "SXM"),
    GpuProduct("A100-PCIE-40GB", "a100-40gb-pcie", 108, 40, "PCIe"),
    GpuProduct("A100 80GB PCIe", "a100-80gb-pcie", 108, 80, "PCIe"),
    GpuProduct("H100 80GB HBM3", "h100-sxm", 132, 80, "SXM"),
    GpuProduct("H100 PCIe", "h100-pcie", 114, 80, "PCIe"),
    GpuProduct("H100 NVL", "h100-nvl", 132, 94, "NVL (PCIe)"),
    GpuProduct("H200", "h200-sxm", 132, 141, "SXM"),
    GpuProduct("H200 NVL", "h200-nvl", 132, 141, "NVL (PCIe)"),
    GpuProduct("H20", "h20-96gb", 78, 96, "SXM"),
    GpuProduct("B200", "b200", 148, 180, "SXM"),
    GpuProduct("RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000", 188, 96, "PCIe"),
)


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
    """The table row whose name equals the device's product name exactly (case-insensitive), or None."""
    want = product_name(device_name).lower()
    return next((p for p in PRODUCTS if p.device_name.lower() == want), None)


def _how_to_add(device_name: str, sm: int | None, mem: float | None) -> str:
    seen = []
    if sm:
        seen.append(f"{sm} SMs")
    if mem:
        seen.append(f"{mem / 2**30:.1f} GiB")
    seen_s = f" ({', '.join(seen)})" if seen else ""
    return (f"to judge it against a spec, add a GpuSpec with its datasheet peaks to harness/specs/gpus.py and a "
            f"GpuProduct({product_name(device_name)!r}, <spec slug>, sm_count, memory_gib, form factor) row to "
            f"microbench/gpu_identity.PRODUCTS{seen_s}")


def identify(device_name: str, sm_count: int | None = None, memory_bytes: float | None = None) -> GpuIdentity:
    """Match by exact name, then check SM count and memory; never fall back to a similar name."""
    from harness.specs.gpus import GPUS

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
    if p.spec is None or p.spec not in GPUS:
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
