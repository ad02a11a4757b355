"""The shipped scenarios of §9.5–9.6 and §9.7.1 reproduce the chapter's numbers end to end."""

from pathlib import Path

import pytest

from harness.model.kv_plan import kv_tiers_plan, lifecycle_plan, routing_plan
from harness.specs.scenario_kv import load_kind
from harness.units import GiB, MiB

SCENARIOS = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


@pytest.fixture(scope="module")
def tiers():
    return kv_tiers_plan(load_kind(SCENARIOS / "ch9-kv-tiers.toml", "kv-tiers")).to_dict()  # as --json prints it


@pytest.fixture(scope="module")
def route():
    return routing_plan(load_kind(SCENARIOS / "ch9-ex9.7-cache-routing.toml", "cache-routing")).to_dict()  # as --json prints it


@pytest.fixture(scope="module")
def life():
    return lifecycle_plan(load_kind(SCENARIOS / "ch9-lifecycle.toml", "lifecycle")).to_dict()  # as --json prints it


def test_kv_tiers_scenario(tiers):
    # §9.5.2 Fig. 9-29 and text; tolerances as in tests/model/test_kv_tiers.py
    t = {x["tier"]: x for x in tiers["tiers"]}
    assert tiers["state_bytes"] == 1.125 * GiB
    assert [t[n]["fetch_s"] * 1e3 for n in ("host", "ssd", "remote")] == pytest.approx([48.3, 170, 96.6], abs=0.15)
    assert tiers["recompute_s"] == pytest.approx(0.856, abs=0.5e-3)
    assert tiers["kv_production_bytes_per_s"] == pytest.approx(1.41e9, rel=2e-3)
    assert [t[n]["retention_s"] for n in ("hbm", "host", "ssd")] == pytest.approx([45, 195, 2722], abs=1)
    caps = {i["interval_s"]: i["capacity_bytes"] for i in tiers["reuse_intervals"]}
    assert caps[10.0] == pytest.approx(14.1e9, rel=2e-3) and caps[600.0] == pytest.approx(846e9, rel=1e-3)
    assert tiers["blocks"]["bytes"] == pytest.approx(3.77e12, rel=2e-3)
    u = tiers["reuse"]
    assert u["decision"]["keep_s"] == pytest.approx(96.6e-3, abs=0.1e-3)
    assert u["critical_bandwidth_bytes_per_s"] == pytest.approx(1.41e9, rel=2e-3)
    assert u["critical_bandwidth_by_uses"][0]["critical_bandwidth_bytes_per_s"] == pytest.approx(2.82e9, rel=2e-3)
    assert u["slow_links"][0]["fetch_s"] == pytest.approx(0.966, abs=0.5e-3)
    assert (u["ssd"]["write_s"], u["ssd"]["read_s"]) == pytest.approx((0.288, 0.170), abs=0.5e-3)
    gqa, mla = u["states"]
    assert (gqa["remote_reads_link_busy_s"], gqa["remote_reads_bandwidth_bytes_per_s"] / 1e9) == pytest.approx((4.83, 121), abs=0.3)
    assert mla["state_bytes"] == 549 * MiB
    assert (mla["remote_reads_link_busy_s"], mla["remote_reads_bandwidth_bytes_per_s"] / 1e9) == pytest.approx((2.30, 57.6), abs=0.05)
    p = tiers["prefetch"]
    assert [p["read_then_compute"]["total_s"], p["per_layer"]["total_s"], p["pre_loaded"]["total_s"]] == pytest.approx(
        [79.2e-3, 49.2e-3, 30.9e-3], abs=0.1e-3)
    assert p["buffer_bytes"] == pytest.approx(437e6, rel=2e-3)
    assert p["layers_to_preload"] == p["layers_to_preload_simulated"] == 14
    pt = {x["tier"]: x for x in p["tiers"]}
    assert [pt[n]["hiding_new_tokens"] for n in ("host", "remote", "ssd")] == pytest.approx([400, 800, 1400], rel=0.02)
    assert pt["ssd"]["read_per_layer_s"] == pytest.approx(4.73e-3, abs=0.005e-3)
    assert pt["ssd"]["per_layer_total_s"] == pytest.approx(0.171, abs=0.5e-3)
    assert pt["ssd"]["queue_wait_to_stage_in_host_s"] == pytest.approx(0.170, abs=0.5e-3)
    assert p["host_prefixes_to_stage"] == 227
    b0, b50 = tiers["ssd_budget"]
    assert b0["endurance_write_bytes_per_s"] == pytest.approx(44.4e6, abs=0.05e6)
    assert b0["overrun_factor"] == pytest.approx(31.7, abs=0.05)
    assert b0["admissible_fraction"] == pytest.approx(0.032, abs=0.0005)
    assert b50["admissible_fraction"] == pytest.approx(0.063, abs=0.001)
    pg = tiers["pages"]
    assert pg["layout"]["page_bytes"] == 2.25 * MiB and pg["layout"]["segments_per_page"] == 72
    assert (pg["reuse"]["pages_read"], pg["reuse"]["pages_used"]) == (64, 63)
    assert (pg["reuse"]["bytes_read"], pg["reuse"]["bytes_used"]) == (144 * MiB, 141.75 * MiB)
    assert pg["missing_page"]["action"] == "recompute"
    ev = tiers["eviction"]["policies"]
    assert ev["queue-aware"]["hit_rate"] > max(ev["lru"]["hit_rate"], ev["fifo"]["hit_rate"])
    h = tiers["handoff"]
    assert (h["direct_s"], h["pooled_s"], h["net_saving_s"]) == pytest.approx((48.3e-3, 96.6e-3, 0.760), abs=1e-3)


def test_example_9_7_scenario(route):
    paths = {p["name"]: p["t_first_s"] for p in route["paths"]}
    assert [paths[n] * 1e3 for n in ("local-hit", "recompute", "fetch-eth-50g", "fetch-nic-200g")] == pytest.approx(
        [281, 907, 282, 137], abs=0.6)
    assert route["best_path"] == "fetch-nic-200g"
    tie = route["tie_bandwidth_bytes_per_s"]
    assert (tie["vs_local_hit"] / 1e9, tie["vs_recompute"] / 1e9) == pytest.approx((6.30, 1.48), abs=0.01)
    assert (route["serial_example"]["overlap_t_first_s"], route["serial_example"]["serial_t_first_s"]) == pytest.approx((0.090, 0.150))
    inv = route["invalidation"]
    assert inv["min_hit_probability_for_mean"] == pytest.approx(0.070, abs=0.001)
    assert inv["min_hit_probability_for_quantile"] == 0.99
    p90 = next(b for b in inv["by_probability"] if b["hit_probability"] == 0.9)
    assert (p90["mean_s"] * 1e3, p90["quantile_s"] * 1e3) == pytest.approx((196.5, 967.2), abs=0.1)
    assert route["link_load"]["demand_bytes_per_s"] == pytest.approx(19.3e9, rel=2e-3)
    st = route["state_restore"]
    assert st["threshold_s"] == pytest.approx(12.666e-3)
    assert [c["choice"] for c in st["choices"]] == ["cache-holder", "free-instance"]


def test_lifecycle_scenario(life):
    g = life["graph_capture"]
    assert (g["break_even_steps"], g["first_net_positive_step"], g["break_even_tokens"]) == pytest.approx((50_000, 50_001, 1.6e6))
    m = life["migration"]
    assert m["state_bytes"] == pytest.approx(41.1e9, rel=1e-3)
    assert [x["catch_up_s"] for x in m["links"]] == pytest.approx([1.65, 6.76], abs=0.005)
    rc = {p["name"]: p for p in life["reconfiguration"]["paths"]}
    assert (rc["50GbE"]["transfer_s"], rc["200G NIC"]["transfer_s"]) == pytest.approx((2.63, 0.66), rel=0.01)
    assert [rc[n]["total_s"] for n in ("50GbE", "200G NIC", "NVLink in one 8xA100")] == pytest.approx([11.6, 9.7, 9.0], abs=0.05)
    assert rc["200G NIC"]["reduction_vs_first"] == pytest.approx(0.17, abs=0.005)
    plans = life["recovery"]["plans"]
    assert [p["replay_tokens"] for p in plans] == [1024, 0]
    assert plans[0]["replay_s"] > 0 and plans[1]["replay_s"] == 0


def test_prefetch_uses_the_layer_count_that_hides_the_read(tiers):
    # issue 18: at 350 new tokens the closed formula ⌈B·(T_read−T_new)/layer⌉ gives 5 layers, but with 5 the
    # simulated pipeline (Fig. 9-33/9-34) still waits on a read: the last layer's compute cannot overlap its own read
    from harness.model.kv_prefetch import layer_pipeline

    s = load_kind(SCENARIOS / "ch9-kv-tiers.toml", "kv-tiers")
    p = kv_tiers_plan(s.model_copy(update={"new_tokens": 350})).to_dict()["prefetch"]
    assert (p["layers_to_preload"], p["layers_to_preload_simulated"], p["layers_to_preload_used"]) == (5, 6, 6)
    assert layer_pipeline(36, p["host_read_s"], p["compute_s"], 5).bound == "read"
    assert p["pre_loaded"]["preloaded_layers"] == 6 and p["pre_loaded"]["bound"] == "compute"
    assert p["pre_loaded"]["total_s"] == pytest.approx(p["compute_s"], rel=1e-9)
    # the chapter's own example: 14 either way (§9.5.2)
    assert tiers["prefetch"]["layers_to_preload_used"] == 14


def test_lifecycle_plan_is_a_typed_record():
    from harness.model.kv_plan_records import LifecyclePlan

    p = lifecycle_plan(load_kind(SCENARIOS / "ch9-lifecycle.toml", "lifecycle"))
    assert isinstance(p, LifecyclePlan)
    assert p.graph_capture.first_net_positive_step == 50_001  # §9.6.1
    assert p.migration.links[0].catch_up.catch_up_s == pytest.approx(1.65, abs=0.01)  # §9.6.2, Fig. 9-43: 1.65 s over 25 GB/s
    assert p.recovery.plans[0].plan.replay_tokens == 1024  # §9.6.3
    assert p.to_dict()["migration"]["links"][0]["link"] == p.migration.links[0].link


def test_kv_tiers_plan_is_a_typed_record():
    p = kv_tiers_plan(load_kind(SCENARIOS / "ch9-kv-tiers.toml", "kv-tiers"))
    assert p.prefetch.pre_loaded.total_s == pytest.approx(30.9e-3, abs=0.1e-3)  # Fig. 9-34
    assert p.reuse.critical_bandwidth_by_uses[0].critical_bandwidth_bytes_per_s == pytest.approx(2.82e9, rel=2e-3)
    host = next(t for t in p.tiers if t.fetch.tier == "host")
    assert host.fetch.fetch_s == pytest.approx(48.3e-3, abs=0.1e-3)  # §9.5.2: 1.125 GiB over 25 GB/s


def test_routing_plan_is_a_typed_record():
    p = routing_plan(load_kind(SCENARIOS / "ch9-ex9.7-cache-routing.toml", "cache-routing"))
    assert p.best_path == min(p.paths, key=lambda x: x.t_first_s).name
    assert p.to_dict()["tie_bandwidth_bytes_per_s"]["vs_local_hit"] == p.tie_bandwidth_bytes_per_s.vs_local_hit
