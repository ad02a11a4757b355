"""GPU name -> spec on real torch.cuda.get_device_name() strings: exact products, SM/memory cross-check, no guessing."""

import pytest

from harness.specs.gpus import GPUS
from microbench.backends import gpu_spec_for
from harness.specs.device_names import DEVICE_FAMILY, DEVICE_NAME_TO_SPEC
from microbench.gpu_identity import PRODUCT_FACTS, _products, identify

MIB = 2**20

# (name as torch prints it, SMs, total_memory as torch reports it, expected spec)
REAL = [
    ("NVIDIA A100-SXM4-40GB", 108, 40536 * MIB, "a100-40gb-sxm"),
    ("Tesla A100-SXM4-40GB", 108, 40536 * MIB, "a100-40gb-sxm"),  # older drivers' prefix
    ("NVIDIA A100-SXM4-80GB", 108, 81251 * MIB, "a100-80gb-sxm"),
    ("NVIDIA A100-PCIE-40GB", 108, 40536 * MIB, "a100-40gb-pcie"),
    ("NVIDIA A100 80GB PCIe", 108, 81051 * MIB, "a100-80gb-pcie"),
    ("NVIDIA H100 80GB HBM3", 132, 81559 * MIB, "h100-sxm"),
    ("NVIDIA H100 PCIe", 114, 81559 * MIB, "h100-pcie"),
    ("NVIDIA H100 NVL", 132, 95830 * MIB, "h100-nvl"),
    ("NVIDIA H200", 132, 143771 * MIB, "h200-sxm"),
    ("NVIDIA H200 NVL", 132, 143771 * MIB, "h200-nvl"),
    ("NVIDIA H20", 78, 97871 * MIB, "h20-96gb"),
    ("NVIDIA B200", 148, 183359 * MIB, "b200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, 97887 * MIB, "rtx-pro-6000"),
]


@pytest.mark.parametrize("name,sms,mem,spec", REAL)
def test_real_names_map_to_their_own_spec(name, sms, mem, spec):
    ident = identify(name, sms, mem)
    assert ident.known and ident.spec.name == spec, ident.reason
    assert "checked" in ident.reason


def test_the_old_substring_traps():
    # "A100" used to give the 40 GB SXM part the 80 GB spec; "H100"/"H200" gave PCIe/NVL parts the SXM spec
    assert gpu_spec_for("NVIDIA A100-SXM4-40GB").hbm_bandwidth_bytes_per_s == 1555e9
    assert gpu_spec_for("NVIDIA H100 PCIe").name == "h100-pcie"
    assert gpu_spec_for("NVIDIA H200 NVL").peak_bf16_flops_per_s < gpu_spec_for("NVIDIA H200").peak_bf16_flops_per_s
    assert gpu_spec_for("NVIDIA H20").name == "h20-96gb"  # not caught by "H200"
    assert gpu_spec_for("NVIDIA H100") is None  # no such product string: no guess


def test_unknown_device_is_refused_with_how_to_add_it():
    ident = identify("NVIDIA GeForce RTX 4090", 128, 24 * 2**30)
    assert ident.spec is None
    assert "NVIDIA GeForce RTX 4090" in ident.reason and "harness/specs/gpus.py" in ident.reason
    assert "device_names.py" in ident.reason and "PRODUCT_FACTS" in ident.reason and "128 SMs" in ident.reason


def test_mig_slice_or_wrong_sku_is_refused():
    mig = identify("NVIDIA A100-SXM4-40GB", 14, 9.5 * 2**30)  # a 1g.10gb slice reports the full product name
    assert mig.spec is None and "14 SMs" in mig.reason and "9.5 GiB" in mig.reason
    assert identify("NVIDIA H100 80GB HBM3", 114, 81559 * MIB).spec is None  # SM count of a PCIe part


def test_every_named_device_has_a_spec_facts_and_a_family():
    for name, spec in DEVICE_NAME_TO_SPEC.items():
        assert spec in GPUS and spec in PRODUCT_FACTS and spec in DEVICE_FAMILY, name
        assert GPUS[spec].hbm_capacity_bytes / 1e9 == pytest.approx(PRODUCT_FACTS[spec][1], rel=0.05), name
    names = [p.device_name.lower() for p in _products()]
    assert len(names) == len(set(names))
    assert {name for name, *_ in REAL if name.startswith("NVIDIA")} == set(DEVICE_NAME_TO_SPEC)  # the table above covers every entry
