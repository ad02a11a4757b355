"""Fit filters and choices: MBU per context, equal-weight pooling, link peaks, pinned over pageable, typed params."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from harness.calibration.apply import MeasuredConstants, read_decode_curves
from harness.calibration.fit import fit_calibration
from harness.calibration.runs import load_machine_runs
from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from harness.errors import HarnessError
from microbench.params import DecodeParams, TransferParams, describe, parse_params

GPU = SyntheticMachine(noise_cv=0.002, n_samples=8)


def _fit(tmp_path, *machines):
    for i, m in enumerate(machines):
        write_synthetic_run(tmp_path, m, i + 1)
    return fit_calibration(load_machine_runs(tmp_path / machines[0].machine), n_bootstrap=20)


def test_one_decode_curve_per_context_and_interpolation_between(tmp_path):
    short = dataclasses.replace(GPU, suites=("decode",), decode_context=1024, decode_mbu=(0.40,) * 7)
    long = dataclasses.replace(GPU, suites=("decode",), decode_context=8192, decode_mbu=(0.60,) * 7)
    rec = _fit(tmp_path, short, long)
    curves = rec.curves_at_contexts("h200-sxm", "decode_bandwidth_efficiency", "bf16")
    assert [c.context_tokens for c in curves] == [1024, 8192]
    mid = read_decode_curves(curves, 8, (1024 + 8192) / 2)
    assert mid.value == pytest.approx(0.50, abs=0.005) and "interpolated" in mid.label


def test_decode_curve_refused_outside_the_measured_contexts(tmp_path):
    rec = _fit(tmp_path, dataclasses.replace(GPU, suites=("decode",), decode_context=4096))
    mc = MeasuredConstants(rec, "cal.json")
    inside = mc.efficiency("h200-sxm", 32, 8192, "bf16", decode_context_tokens=4300)  # within 10 %
    assert inside.bandwidth == pytest.approx(0.49, abs=0.01) and "held from context 4096" in inside.source
    far = mc.efficiency("h200-sxm", 32, 8192, "bf16", decode_context_tokens=8704)
    assert far.bandwidth == 0.5 and "not applied" in far.source and "4096" in far.source
    rows = {r.constant: r for r in mc.provenance(["h200-sxm"], None, 32, 8192, "bf16", None, decode_context_tokens=8704)}
    assert rows["h200-sxm.bandwidth_efficiency"].origin == "datasheet default"
    assert "not applied" in rows["h200-sxm.bandwidth_efficiency"].source


def test_pav_gives_each_batch_equal_weight_whatever_its_sample_count(tmp_path):
    m = dataclasses.replace(GPU, decode_batches=(1, 8), decode_mbu=(0.40, 0.30), suites=("decode",), noise_cv=0.0005)
    run = write_synthetic_run(tmp_path, m, 1)
    # give the fast case (batch 1) 10× the samples, as a time-budgeted timer would
    part = next((run / "micro_samples").glob("*.parquet"))
    df = pd.read_parquet(part)
    fast = df[df["case_id"].str.contains("step-b1-")]
    pd.concat([df] + [fast] * 9, ignore_index=True).to_parquet(part)
    rec = fit_calibration(load_machine_runs(tmp_path / m.machine), n_bootstrap=20)
    assert [p.fitted for p in rec.curves[0].points] == pytest.approx([0.35, 0.35], abs=0.002)


def test_eager_decode_steps_left_out_when_graph_steps_exist(tmp_path):
    graph = dataclasses.replace(GPU, suites=("decode",), decode_mbu=(0.8,) * 7)
    rec = _fit(tmp_path, graph)
    assert all(p.measured.value == pytest.approx(0.8, rel=0.01) for p in rec.curves[0].points)


def test_links_above_the_spec_peak_are_not_fitted(tmp_path):
    # 6 TB/s over a link whose case peak is the 4.8 TB/s HBM spec: a cache-served copy, never fitted
    m = dataclasses.replace(GPU, suites=("transfer", "decode"), links=(("pcie", "h2d", "pinned", 5e-6, 6000e9),))
    rec = _fit(tmp_path, m)
    assert rec.links == ()
    assert any("faster than the spec peak" in w or "above the spec peak" in w for w in rec.warnings)


def test_link_fit_prefers_pinned_over_pageable_and_states_the_byte_convention(tmp_path):
    m = dataclasses.replace(GPU, suites=("transfer",), links=(("pcie", "h2d", "pinned", 10e-6, 50e9),
                                                              ("pcie", "h2d", "pageable", 20e-6, 20e9)))
    rec = _fit(tmp_path, m)
    lf, proxy, why = MeasuredConstants(rec, "c.json").link_choice("pcie")
    assert lf.memory == "pinned" and not proxy and "pinned host memory preferred" in why
    assert "counted once" in lf.byte_convention and "nvbandwidth" in lf.byte_convention
    lc = MeasuredConstants(rec, "c.json").link("pcie")
    assert lc.bandwidth_bytes_per_s == pytest.approx(50e9, rel=0.02) and "pinned" in lc.label


def test_untyped_params_are_not_read_and_the_user_is_told(tmp_path):
    run = write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode", "gemm")), 1)
    part = next((run / "micro_cases").glob("*.parquet"))
    df = pd.read_parquet(part)
    legacy = [s.replace('"params_record": "decode/1", ', "") for s in df["params_json"]]
    df.assign(params_json=legacy).to_parquet(part)
    rec = fit_calibration(load_machine_runs(tmp_path / GPU.machine), n_bootstrap=20)
    assert [c.quantity for c in rec.curves] == ["prefill_compute_efficiency"]
    assert any("suite decode" in w and "no typed params record" in w for w in rec.warnings)


def test_a_mistyped_params_record_is_an_error_naming_case_and_field():
    p = DecodeParams(model="qwen3-8b", kind="step", batch=4, context_tokens=4096).to_params()
    with pytest.raises(HarnessError, match=r"decode:x: .*field 'batch' must be an integer, got '4'"):
        parse_params({**p, "batch": "4"}, "decode:x")
    with pytest.raises(HarnessError, match="lacks field"):
        parse_params({k: v for k, v in p.items() if k != "context_tokens"}, "decode:x")
    with pytest.raises(HarnessError, match="newer than this harness"):
        parse_params({**p, "params_record": "decode/9"}, "decode:x")
    with pytest.raises(HarnessError, match="bytes_counted"):
        TransferParams(link="pcie", direction="h2d", size_bytes=4096, bytes_counted="payload")  # type: ignore[arg-type]


def test_records_round_trip_and_every_field_has_a_documented_unit_or_is_unitless():
    p = TransferParams(link="hbm", direction="d2d", size_bytes=2**30, bytes_counted="read+write", extra={"payload_bytes": 2**30})
    back = parse_params(p.to_params())
    assert back == p and back.is_link_point
    rows = describe()
    assert {"record": "decode/1", "name": "context_tokens", "type": "int", "unit": "tokens",
            "doc": "keys per sequence the step attends to"} in rows
    assert all(r["doc"] for r in rows)
    assert np.unique([(r["record"], r["name"]) for r in rows], axis=0).shape[0] == len(rows)


def test_link_fit_prefers_the_copy_method_the_model_uses():
    from harness.calibration.record import CalibrationRecord, Estimate, LinkFit

    def fit(method, bw):
        e = lambda v, u: Estimate(v, v, v, u, 10, ("r",), "test")  # noqa: E731
        return LinkFit("pcie", "h2d", "pinned", e(5e-6, "s"), e(bw, "bytes/s"), (1.0,), (1.0,), (1.0,), "1/T²", method=method)

    rec = CalibrationRecord("m", {}, (), 0, 10, links=(fit("copy_engine:pipelined", 40e9), fit("copy_engine:single", 50e9),
                                                     fit("sm_kernel:pipelined", 30e9)))
    lf, _, why = MeasuredConstants(rec, "c.json").link_choice("pcie")
    assert lf.method == "copy_engine:single" and "waited on" in why
