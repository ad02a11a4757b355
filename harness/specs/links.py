"""Link spec catalog: payload bandwidth per direction and per-transfer startup latency."""

from __future__ import annotations

from dataclasses import dataclass

from harness.specs._validate import non_negative, positive, unknown

DEFAULT_STARTUP_LATENCY_S = 5e-6  # Chapter 9, example 9.1: 5 µs per launch and sync


@dataclass(frozen=True, slots=True)
class LinkSpec:
    name: str
    bandwidth_bytes_per_s: float  # usable payload bandwidth, one direction
    startup_latency_s: float
    source: str

    def __post_init__(self) -> None:
        owner = f"link spec {self.name!r}"
        positive(owner, "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        non_negative(owner, "startup_latency_s", self.startup_latency_s)


_A = DEFAULT_STARTUP_LATENCY_S

LINKS: dict[str, LinkSpec] = {
    link.name: link
    for link in [
        LinkSpec("nic-200g", 25e9, _A, "200 Gbit/s RDMA NIC, 25 GB/s payload per direction (Chapter 9, example 9.1)"),
        LinkSpec("cx7-400g", 50e9, _A, "NVIDIA ConnectX-7 400 Gbit/s, 50 GB/s per direction (Chapter 9, example 9.5)"),
        LinkSpec("eth-100g", 12.5e9, _A, "100 GbE, 12.5 GB/s per direction (Chapter 9, §9.2.2)"),
        LinkSpec("eth-50g", 6.25e9, _A, "50 GbE, 6.25 GB/s per direction (Chapter 9, example 9.7)"),
        LinkSpec("eth-10g", 1.25e9, _A, "10 GbE, 1.25 GB/s per direction (Chapter 9, §9.5.2)"),
        LinkSpec("pcie4-x16", 25e9, _A, "PCIe 4.0 x16: 32 GB/s theoretical, 25 GB/s effective (Chapter 9, example 9.3)"),
        LinkSpec("pcie5-x16", 50e9, _A, "PCIe 5.0 x16: 64 GB/s theoretical, 50 GB/s effective (same 78% derating as PCIe 4.0)"),
        LinkSpec("nvlink-a100", 300e9, _A, "A100 NVLink 3: 600 GB/s bidirectional, 300 GB/s per direction (A100 datasheet)"),
        LinkSpec("nvlink-h100", 450e9, _A, "H100 NVLink 4: 900 GB/s bidirectional, 450 GB/s per direction (H100 datasheet; Chapter 9, example 9.6)"),
        LinkSpec("nvlink-h200", 450e9, _A, "H200 SXM NVLink 4: 900 GB/s bidirectional, 450 GB/s per direction (H200 datasheet)"),
        LinkSpec("nvlink-h20", 450e9, _A, "H20 NVLink: 900 GB/s bidirectional, 450 GB/s per direction (as reported for the HGX H20)"),
        LinkSpec("nvlink-b200", 900e9, _A, "B200 NVLink 5: 1.8 TB/s bidirectional, 900 GB/s per direction (HGX B200 datasheet)"),
    ]
}

# the link between the cards of one server, by GPU spec (tensor-parallel all-reduces run on it): NVLink on the SXM
# parts, the host's PCIe on the PCIe parts (no NVLink bridge assumed)
INTRA_NODE_LINK: dict[str, str] = {
    "a100-80gb-sxm": "nvlink-a100", "a100-40gb-sxm": "nvlink-a100", "a100-40gb-pcie": "pcie4-x16",
    "a100-80gb-pcie": "pcie4-x16", "h100-sxm": "nvlink-h100", "h100-pcie": "pcie5-x16", "h100-nvl": "pcie5-x16",
    "h200-sxm": "nvlink-h200", "h200-nvl": "pcie5-x16", "h20-96gb": "nvlink-h20", "b200": "nvlink-b200",
    "rtx-pro-6000": "pcie5-x16",
}


def intra_node_link(gpu: str) -> LinkSpec | None:
    """The link the cards of one server of `gpu` talk over (None when the catalog does not say)."""
    name = INTRA_NODE_LINK.get(gpu)
    return LINKS.get(name) if name else None


def get_link(name: str) -> LinkSpec:
    try:
        return LINKS[name]
    except KeyError:
        raise unknown("link spec", name, list(LINKS), "List them with `harness specs list`.") from None
