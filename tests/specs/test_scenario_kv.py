"""Scenario kinds "kv-tiers", "cache-routing" and "lifecycle": every bad value names its field."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.specs.scenario import load_any_scenario, load_scenario
from harness.specs.scenario_kv import CacheRoutingScenario, KvTiersScenario, LifecycleScenario, load_kind

SCENARIOS = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"
FILES = {"kv-tiers": "ch9-kv-tiers.toml", "cache-routing": "ch9-ex9.7-cache-routing.toml", "lifecycle": "ch9-lifecycle.toml"}


@pytest.mark.parametrize("kind,cls", [("kv-tiers", KvTiersScenario), ("cache-routing", CacheRoutingScenario), ("lifecycle", LifecycleScenario)])
def test_shipped_files_load_through_the_registry(kind, cls):
    s = load_any_scenario(SCENARIOS / FILES[kind])
    assert isinstance(s, cls) and s.kind == kind


def test_pd_loader_refuses_these_kinds():
    with pytest.raises(HarnessError, match="of kind 'kv-tiers'"):
        load_scenario(SCENARIOS / FILES["kv-tiers"])


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("body,needle", [
    ('server = "dgx-h100"', "server: unknown server 'dgx-h100'"),
    ('prefix_tokens = 0', "prefix_tokens: Input should be greater than or equal to 1"),
    ('[compute]\ngpu = "a200"', "compute.gpu: unknown GPU 'a200'"),
    ('[reuse]\nlink = "carrier-pigeon"', "reuse.link: unknown link 'carrier-pigeon'"),
    ('[ssd_budget]\nprefix_hit_rates = [1.0]', "ssd_budget.prefix_hit_rates[0]"),
    ('[pages]\nprompt_tokens = 100\npages_read = 64', "pages_read (64) exceeds the 7 pages"),
    ('[eviction]\nhost_slots = 0', "eviction.host_slots"),
    ('bogus = 1', "bogus: unknown field"),
    ('schema_version = 9', "newer than this harness understands"),
])
def test_kv_tiers_errors_name_the_field(tmp_path, body, needle):
    p = _write(tmp_path, f'kind = "kv-tiers"\nname = "t"\n{body}\n')
    with pytest.raises(HarnessError) as e:
        load_kind(p, "kv-tiers")
    assert needle in str(e.value)


@pytest.mark.parametrize("body,needle", [
    ('', "holder_queue_s: missing"),
    ('holder_queue_s = -0.1\nfree_queue_s = 0.02', "holder_queue_s: Input should be greater than or equal to 0"),
    ('holder_queue_s = 0.25\nfree_queue_s = 0.02\n[invalidation]\nholder_queue_s = 0.08\nhit_probabilities = [1.5]',
     "invalidation.hit_probabilities[0]"),
    ('holder_queue_s = 0.25\nfree_queue_s = 0.02\n[fetch]\nremote_links = ["eth-1t"]', "fetch.remote_links[0]: unknown link 'eth-1t'"),
])
def test_routing_errors_name_the_field(tmp_path, body, needle):
    p = _write(tmp_path, f'kind = "cache-routing"\nname = "t"\n{body}\n')
    with pytest.raises(HarnessError) as e:
        load_kind(p, "cache-routing")
    assert needle in str(e.value)


@pytest.mark.parametrize("body,needle", [
    ('', "give at least one of"),
    ('[graph_capture]\nextra_startup_s = 10\nsaving_per_step_s = 0', "graph_capture.saving_per_step_s"),
    ('[migration]\nlinks = []', "migration.links"),
    ('[recovery]\ninput_tokens = 10\ndelivered_output_tokens = 5\nlogged_output_tokens = 5\nkv_checkpoint_tokens = [20]',
     "kv_checkpoint_tokens entry 20 exceeds"),
])
def test_lifecycle_errors_name_the_field(tmp_path, body, needle):
    p = _write(tmp_path, f'kind = "lifecycle"\nname = "t"\n{body}\n')
    with pytest.raises(HarnessError) as e:
        load_kind(p, "lifecycle")
    assert needle in str(e.value)


def test_wrong_kind_names_the_subcommand(tmp_path):
    with pytest.raises(HarnessError, match="of kind 'lifecycle', not 'kv-tiers'"):
        load_kind(SCENARIOS / FILES["lifecycle"], "kv-tiers")
