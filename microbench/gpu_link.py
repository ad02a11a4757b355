"""The links of the torch device a case runs on, read through NVML by its PCI bus id: PCIe, NVLink, clocks.

NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES; torch's `cuda:0` can be any of
them. So the NVML handle is looked up by the bus id torch reports for the device
(`get_device_properties(i).pci_domain_id/pci_bus_id/pci_device_id`), never by index 0.

PCIe peak per direction = lane rate of the generation (after 128b/130b coding for gen3-5, FLIT
for gen6) × width. The generation is the maximum the GPU and the slot support
(nvmlDeviceGetMaxPcieLinkGeneration): the current generation drops at idle to save power and
is recorded, not used. The width is the CURRENT width: a x16 card trained down to x8 moves half
the bytes, and the peak says so (with a note naming both widths).

NVLink peak per direction = active links × per-link rate by NVLink version (25 GB/s per direction
for versions 2-4, i.e. A100's 12 links = 300 GB/s and H100/H200's 18 links = 450 GB/s; 50 GB/s for
version 5, B200's 18 links = 900 GB/s).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.case import Peak

PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
NVLINK_LINK_BYTES_PER_S = {2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}  # per link, per direction
MAX_NVLINKS = 18


def nvml_bus_id(domain: int, bus: int, device: int) -> str:
    """NVML's form of a PCI address: 8 hex digits of domain, 'DDDDDDDD:BB:DD.0'."""
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def sysfs_bus_id(domain: int, bus: int, device: int) -> str:
    """/sys/bus/pci/devices/ form: '0000:3b:00.0'."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def torch_bus_id(torch: Any, index: int) -> tuple[int, int, int] | None:
    props = torch.cuda.get_device_properties(index)
    try:
        return int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id)
    except AttributeError:
        return None


@dataclass(frozen=True, slots=True)
class PcieLink:
    bus_id: str | None
    max_gen: int | None
    max_width: int | None
    current_gen: int | None
    current_width: int | None
    numa_node: int | None
    source: str

    @property
    def degraded(self) -> bool:
        return bool(self.current_width and self.max_width and self.current_width < self.max_width)

    def peak(self) -> Peak:
        """Per-direction theoretical peak of the link as trained (max generation × current width)."""
        gen = self.max_gen
        width = self.current_width or self.max_width
        rate = PCIE_LANE_BYTES_PER_S.get(gen or -1)
        if not rate or not width:
            return Peak(None, None, f"PCIe link unknown ({self.source}); no link peak")
        note = f"PCIe gen{gen} x{width} theoretical per direction ({self.source}, bus {self.bus_id})"
        if self.degraded:
            note += f"; LINK TRAINED DOWN to x{self.current_width} of x{self.max_width}"
        return Peak(None, rate * width, note)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["degraded"] = self.degraded
        d["peak_bytes_per_s"] = self.peak().bytes_per_s
        return d


def _nvml() -> Any | None:
    try:
        # lazy: optional at run time: no NVML library or driver on a CPU host
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no NVML library or no driver
        return None


def nvml_handle(torch: Any, index: int) -> tuple[Any, Any, str]:
    """(pynvml, handle, how it was found) for torch's device `index`; handle None with the reason when it cannot be."""
    nv = _nvml()
    if nv is None:
        return None, None, "NVML unavailable"
    ids = torch_bus_id(torch, index)
    if ids is None:
        return nv, None, "torch does not report the device's PCI bus id; NVML handle not matched"
    bus = nvml_bus_id(*ids)
    try:
        return nv, nv.nvmlDeviceGetHandleByPciBusId(bus), f"NVML handle by bus id {bus}"
    except Exception as exc:  # noqa: BLE001
        return nv, None, f"NVML has no device at bus id {bus} ({exc})"


def _numa_node(ids: tuple[int, int, int] | None) -> int | None:
    if ids is None:
        return None
    try:
        v = int((Path("/sys/bus/pci/devices") / sysfs_bus_id(*ids) / "numa_node").read_text().strip())
        return v if v >= 0 else None
    except (OSError, ValueError):
        return None


def read_pcie_link(torch: Any, index: int) -> PcieLink:
    nv, h, how = nvml_handle(torch, index)
    ids = torch_bus_id(torch, index)
    bus = nvml_bus_id(*ids) if ids else None
    if h is None:
        return PcieLink(bus, None, None, None, None, _numa_node(ids), how)

    def q(name: str) -> int | None:
        try:
            return int(getattr(nv, name)(h))
        except Exception:  # noqa: BLE001 - a query the driver does not answer stays unknown
            return None

    return PcieLink(bus, q("nvmlDeviceGetMaxPcieLinkGeneration"), q("nvmlDeviceGetMaxPcieLinkWidth"),
                    q("nvmlDeviceGetCurrPcieLinkGeneration"), q("nvmlDeviceGetCurrPcieLinkWidth"), _numa_node(ids), how)


def nvlink_peak(versions_of_active_links: list[int]) -> Peak:
    """Per-direction NVLink peak from the NVLink version of each active link."""
    if not versions_of_active_links:
        return Peak(None, None, "no active NVLink")
    rates = [NVLINK_LINK_BYTES_PER_S.get(v) for v in versions_of_active_links]
    if any(r is None for r in rates):
        return Peak(None, None, f"NVLink version(s) {sorted(set(versions_of_active_links))} without a per-link rate in microbench.gpu_link")
    return Peak(None, float(sum(rates)), f"{len(rates)} active NVLink(s) v{max(versions_of_active_links)} × "
                                         f"{rates[0] / 1e9:g} GB/s per direction (NVML link state)")


def read_nvlink_peak(torch: Any, index: int) -> Peak:
    nv, h, how = nvml_handle(torch, index)
    if h is None:
        return Peak(None, None, f"NVLink unknown: {how}")
    versions = []
    for link in range(MAX_NVLINKS):
        try:
            if nv.nvmlDeviceGetNvLinkState(h, link):
                versions.append(int(nv.nvmlDeviceGetNvLinkVersion(h, link)))
        except Exception:  # noqa: BLE001 - links past the device's count raise
            break
    return nvlink_peak(versions)


class NvmlClocks:
    """`read() -> (sm_clock_hz, mem_clock_hz)` of one device, None where NVML cannot tell."""

    def __init__(self, nv: Any, handle: Any):
        self.nv, self.h = nv, handle

    def read(self) -> tuple[float | None, float | None]:
        try:
            sm = self.nv.nvmlDeviceGetClockInfo(self.h, self.nv.NVML_CLOCK_SM) * 1e6
            mem = self.nv.nvmlDeviceGetClockInfo(self.h, self.nv.NVML_CLOCK_MEM) * 1e6
            return float(sm), float(mem)
        except Exception:  # noqa: BLE001
            return None, None


def clock_probe(torch: Any, index: int) -> NvmlClocks | None:
    nv, h, _ = nvml_handle(torch, index)
    return NvmlClocks(nv, h) if h is not None else None


def nvidia_smi_topology(timeout_s: float = 10.0) -> str | None:
    """`nvidia-smi topo -m` text, or None where the tool is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def topology_facts(torch: Any) -> dict[str, Any]:
    """For the run manifest: every visible device's bus id, PCIe link (max and current gen/width), NUMA node, topo -m."""
    devices = []
    for i in range(torch.cuda.device_count()):
        link = read_pcie_link(torch, i)
        devices.append({"index": i, "name": torch.cuda.get_device_name(i), "pcie": link.to_dict(),
                        "nvlink_peak_bytes_per_s": read_nvlink_peak(torch, i).bytes_per_s})
    return {"devices": devices, "nvidia_smi_topo_m": nvidia_smi_topology()}
