"""Storage tiers for KV state: SSD and server specs, and the per-GPU tiers HBM, host, SSD, remote pool.

Chapter 9, §9.5.2 (Fig. 9-29) and footnote 17: a DGX A100 (8×A100 80GB, 2 TiB host memory,
8×3.84 TB U.2 NVMe, 8×200 Gbit/s NICs) divided per GPU; SSD Solidigm D7-P5520 3.84 TB,
7.1/4.2 GB/s sequential read/write, 1 DWPD for 5 years.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import positive, positive_int, unknown
from harness.specs.gpus import get_gpu
from harness.specs.links import get_link
from harness.units import TiB

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_YEAR = 365.0 * SECONDS_PER_DAY

TierName = Literal["hbm", "host", "ssd", "remote"]


@dataclass(frozen=True, slots=True)
class SsdSpec:
    name: str
    capacity_bytes: float
    seq_read_bytes_per_s: float
    seq_write_bytes_per_s: float
    drive_writes_per_day: float  # DWPD over the warranty
    warranty_years: float
    source: str

    def __post_init__(self) -> None:
        owner = f"SSD spec {self.name!r}"
        for f in ("capacity_bytes", "seq_read_bytes_per_s", "seq_write_bytes_per_s", "drive_writes_per_day", "warranty_years"):
            positive(owner, f, getattr(self, f))

    @property
    def endurance_write_bytes_per_s(self) -> float:
        """Sustained write the rated endurance allows: capacity·DWPD / 86 400 s (§9.5.2: 44.4 MB/s)."""
        return self.capacity_bytes * self.drive_writes_per_day / SECONDS_PER_DAY

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "capacity_bytes": self.capacity_bytes,
            "seq_read_bytes_per_s": self.seq_read_bytes_per_s,
            "seq_write_bytes_per_s": self.seq_write_bytes_per_s,
            "drive_writes_per_day": self.drive_writes_per_day,
            "warranty_years": self.warranty_years,
            "endurance_write_bytes_per_s": self.endurance_write_bytes_per_s,
            "source": self.source,
        }


SSDS: dict[str, SsdSpec] = {
    s.name: s
    for s in [
        SsdSpec(
            "solidigm-d7-p5520-3.84tb", 3.84e12, 7.1e9, 4.2e9, 1.0, 5.0,
            "Solidigm D7-P5520 product brief (3.84 TB U.2: 128K sequential read/write up to 7,100/4,200 MB/s, "
            "1 DWPD for 5 years); Chapter 9, §9.5.2 and footnote 17",
        ),
    ]
}


def get_ssd(name: str) -> SsdSpec:
    try:
        return SSDS[name]
    except KeyError:
        raise unknown("SSD spec", name, list(SSDS)) from None


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A multi-GPU server whose host memory, SSDs and NICs are shared out evenly per GPU."""

    name: str
    gpu: str  # GPU catalog name
    gpus: int
    host_memory_bytes: float
    ssd: str  # SSD catalog name
    ssds: int
    nic: str  # link catalog name of one NIC
    nics: int
    host_link: str  # link catalog name between host memory and one GPU
    source: str

    def __post_init__(self) -> None:
        owner = f"server spec {self.name!r}"
        for f in ("gpus", "ssds", "nics"):
            positive_int(owner, f, getattr(self, f))
        positive(owner, "host_memory_bytes", self.host_memory_bytes)


SERVERS: dict[str, ServerSpec] = {
    s.name: s
    for s in [
        ServerSpec(
            "dgx-a100", "a100-80gb-sxm", 8, 2 * TiB, "solidigm-d7-p5520-3.84tb", 8, "nic-200g", 8, "pcie4-x16",
            "NVIDIA DGX A100 datasheet (8×A100 80GB, 2 TB host memory, 8×3.84 TB U.2 NVMe, 8 single-port "
            "200 Gb/s NICs); Chapter 9, §9.5.2 and footnote 17 (2 TiB shared evenly by 8 GPUs, the chapter's D7-P5520 SSD)",
        ),
    ]
}


def get_server(name: str) -> ServerSpec:
    try:
        return SERVERS[name]
    except KeyError:
        raise unknown("server spec", name, list(SERVERS)) from None


@dataclass(frozen=True, slots=True)
class Hop:
    """One store-and-forward stage on the way to the GPU."""

    name: str
    bandwidth_bytes_per_s: float

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s}


@dataclass(frozen=True, slots=True)
class StorageTier:
    """Where one GPU's KV state can live: capacity, the serial fetch path to the GPU, and the write rate."""

    name: TierName
    capacity_bytes: float  # math.inf for a pool that grows with nodes
    fetch_hops: tuple[Hop, ...]  # empty: already on the GPU
    write_bandwidth_bytes_per_s: float | None  # None: written in place (HBM)
    source: str

    def __post_init__(self) -> None:
        owner = f"storage tier {self.name!r}"
        if not (self.capacity_bytes > 0):
            raise HarnessError(f"{owner}: capacity_bytes must be > 0, got {self.capacity_bytes!r}.")
        for h in self.fetch_hops:
            positive(owner, f"fetch hop {h.name!r} bandwidth_bytes_per_s", h.bandwidth_bytes_per_s)
        if self.write_bandwidth_bytes_per_s is not None:
            positive(owner, "write_bandwidth_bytes_per_s", self.write_bandwidth_bytes_per_s)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "capacity_bytes": None if math.isinf(self.capacity_bytes) else self.capacity_bytes,
            "fetch_hops": [h.to_dict() for h in self.fetch_hops],
            "write_bandwidth_bytes_per_s": self.write_bandwidth_bytes_per_s,
            "source": self.source,
        }


def per_gpu_tiers(server: ServerSpec, weight_bytes: float) -> tuple[StorageTier, ...]:
    """The four tiers one GPU of `server` sees (§9.5.2, Fig. 9-29).

    HBM: capacity − weights (an upper bound, no activations/workspace; 80 − 16.4 = 63.6 GB).
    Host: host memory / GPUs over the host link (256 GiB over PCIe 4.0 x16 at 25 GB/s).
    SSD: SSDs·capacity / GPUs at the SSD's sequential read (3.84 TB at 7.1 GB/s).
    Remote pool: unbounded, NIC into host memory then the host link, one after the other.
    """
    gpu = get_gpu(server.gpu)
    ssd = get_ssd(server.ssd)
    nic = get_link(server.nic)
    host = get_link(server.host_link)
    if not (0 <= weight_bytes < gpu.hbm_capacity_bytes):
        raise HarnessError(
            f"weight_bytes ({weight_bytes!r}) must be in [0, {gpu.hbm_capacity_bytes:g}) for {gpu.name}; "
            "the model does not fit one GPU, so no HBM is left for KV."
        )
    host_hop = Hop(f"host link {host.name}", host.bandwidth_bytes_per_s)
    return (
        StorageTier("hbm", gpu.hbm_capacity_bytes - weight_bytes, (), None,
                    f"{gpu.name} HBM minus BF16 weights (upper bound); {gpu.source}"),
        StorageTier("host", server.host_memory_bytes / server.gpus, (host_hop,), host.bandwidth_bytes_per_s,
                    f"{server.name} host memory / {server.gpus} GPUs; {host.source}"),
        StorageTier("ssd", server.ssds * ssd.capacity_bytes / server.gpus,
                    (Hop(f"SSD sequential read {ssd.name}", ssd.seq_read_bytes_per_s),), ssd.seq_write_bytes_per_s,
                    f"{server.ssds}×{ssd.name} / {server.gpus} GPUs; {ssd.source}"),
        StorageTier("remote", math.inf, (Hop(f"NIC {nic.name}", nic.bandwidth_bytes_per_s), host_hop),
                    nic.bandwidth_bytes_per_s,
                    f"remote pool over {server.nic} into host memory, then {server.host_link} (serial); {nic.source}"),
    )
