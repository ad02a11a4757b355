"""Run suites into one results/<machine>/<run_id>/ directory: manifest, cases, raw samples, skips, telemetry."""

from __future__ import annotations

import dataclasses
import gc
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy

from harness.records import new_manifest
from harness.specs.host import detect_host
from harness.store import RunWriter
from harness.telemetry import nvtx_ranges
from harness.telemetry.nvml import POWER_NOTE, NvmlSampler, gpu_facts, nvml_indices_for_cuda
from microbench.backends import detect_backends
from microbench.case import CaseResult, Skip
from microbench.gpu_link import topology_facts
from microbench.suite import Planned, SuiteContext, parse_suites, suite_module
from microbench.timing import FULL, QUICK

ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class RunSummary:
    path: Path
    run_id: str
    suites: tuple[str, ...]
    cases: tuple[dict[str, Any], ...]
    skips: tuple[dict[str, str], ...]
    telemetry: dict[str, Any]
    notes: tuple[str, ...] = field(default=())

    @property
    def invalid(self) -> list[dict[str, Any]]:
        return [c for c in self.cases if not c["valid"]]

    @property
    def unstable(self) -> list[dict[str, Any]]:
        return [c for c in self.cases if c["unstable"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "run_id": self.run_id, "suites": list(self.suites), "cases": list(self.cases),
            "skips": list(self.skips), "telemetry": self.telemetry, "notes": list(self.notes),
            "n_invalid": len(self.invalid), "n_unstable": len(self.unstable),
        }


def _cpu_clocks() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("scaling_governor", "scaling_cur_freq", "cpuinfo_max_freq"):
        p = Path("/sys/devices/system/cpu/cpu0/cpufreq") / name
        try:
            out[f"cpu0_{name}"] = p.read_text().strip()
        except OSError:
            pass
    return out


def run_micro(suites: str | list[str], *, quick: bool = False, out: str | Path = "results", budget_s: float | None = None,
              device: str = "auto", seed: int = 0, storage_path: str | Path | None = None,
              progress: ProgressFn | None = None, command_line: list[str] | None = None,
              options: dict[str, Any] | None = None) -> RunSummary:
    """Measure `suites` and store every case, raw sample and skip; returns what was written."""
    names = parse_suites(suites) if isinstance(suites, str) else parse_suites(",".join(suites))
    policy = QUICK if quick else FULL
    if budget_s is not None:
        policy = dataclasses.replace(policy, budget_s=budget_s)
    host = detect_host()
    det = detect_backends(host, device)
    facts = gpu_facts()
    cuda_devices = [b.device for b in det.backends if b.is_cuda]  # sample the GPUs in use only
    sampler = NvmlSampler(period_s=0.1, gpu_indices=nvml_indices_for_cuda(cuda_devices) if cuda_devices else [])
    nvtx_on, nvtx_line = nvtx_ranges.status()
    notes: list[str] = []
    if not sampler.available and not nvtx_on:
        notes.append(f"telemetry off: {sampler.note}; NVTX ranges are no-ops")
    else:
        notes += [f"NVML: {sampler.note}", nvtx_line]
    clocks = {"cpu": _cpu_clocks(), "host_clock_hz": host.clock_hz}
    topology = _gpu_topology(det)
    if facts:
        clocks["gpus_at_start"] = facts.get("gpus", [])
    manifest = new_manifest(
        "micro",
        seeds={"numpy": seed, "torch": seed},
        gpu_name=det.gpu_names[0] if det.gpu_names else None,
        gpu_driver=facts.get("driver"),
        cuda_version=det.cuda_version,
        torch_version=det.torch_version,
        clocks=clocks,
        command_line=command_line,
        notes=notes,
        extra={
            "suites": names, "quick": quick, "policy": dataclasses.asdict(policy), "device": device,
            "host_spec": host.to_dict(), "backends": [b.label for b in det.backends],
            "missing_backends": [{"backend": b, "reason": r} for b, r in det.missing],
            "python": platform.python_version(), "numpy_version": _numpy_version(),
            "gpu_topology": topology,
            "gpu_spec_choice": {b.device: b.spec_note for b in det.backends if b.is_cuda},
        },
    )
    ctx = SuiteContext(quick=quick, policy=policy, host=host, detected=det, seed=seed,
                       storage_path=Path(storage_path) if storage_path else None, options=options or {})
    all_cases: list[dict[str, Any]] = []
    all_skips: list[dict[str, str]] = []
    # plan every suite before the run directory exists (a bad option then leaves nothing behind);
    # models and buffers are built lazily by each case, so planning is cheap
    planned = {n: list(suite_module(n).cases(ctx)) for n in names}
    with RunWriter(manifest, out) as w, sampler:
        skips = [Skip(n, f"{b}", f"backend {b} unavailable: {r}") for n in names for b, r in det.missing if n != "storage"]
        total = sum(isinstance(i, Planned) for items in planned.values() for i in items)
        done = 0
        for n in names:
            results: list[CaseResult] = []
            for item in planned[n]:
                if isinstance(item, Skip):
                    skips.append(item)
                    continue
                if progress:
                    progress(done, total, f"{n}:{item.case}")
                with nvtx_ranges.nvtx_range(f"{n}:{item.case}"), sampler.window(f"{n}:{item.case}"):
                    got = _run_item(item, skips)
                done += 1
                results += got
            planned[n] = []  # drop the suite's closures and the buffers/models they hold
            _release_memory(det)
            if results:
                w.append("micro_cases", [r.to_row() for r in results])
                w.append("micro_samples", [row for r in results for row in r.sample_rows()])
                for table in sorted({t for r in results for t in r.tables}):
                    w.append(table, [row for r in results for row in r.tables.get(table, [])])
                all_cases += [r.to_dict() for r in results]
            suite_skips = [s for s in skips if s.suite == n]
            if suite_skips:
                w.append("micro_skips", [s.to_row() for s in suite_skips])
                all_skips += [s.to_row() for s in suite_skips]
        if progress:
            progress(total, total, "done")
        sampler.stop()
        telemetry: dict[str, Any] = {"nvml": sampler.note, "nvtx": nvtx_line, "samples": len(sampler.samples)}
        verdict = sampler.verdict()
        if verdict is not None:
            telemetry["throttle"] = verdict.to_dict()
            w.append("telemetry_nvml", [s.to_row() for s in sampler.samples])
            telemetry["power_note"] = POWER_NOTE
            by_case = {k: v for k, v in sampler.case_verdicts().items() if v.throttled}
            telemetry["throttled_cases"] = {k: list(v.reasons) for k, v in by_case.items()}
            if by_case:
                notes.append(f"THROTTLED during {len(by_case)} case(s): " + "; ".join(
                    f"{k} ({', '.join(v.reasons)})" for k, v in list(by_case.items())[:5]))
            elif verdict.throttled:
                notes.append("THROTTLED (between cases, none of them overlapped): " + "; ".join(verdict.reasons))
        w.update_manifest(telemetry=telemetry, notes=notes)
    return RunSummary(w.path, manifest.run_id, tuple(names), tuple(all_cases), tuple(all_skips), telemetry, tuple(notes))


def _run_item(item: Planned, skips: list[Skip]) -> list[CaseResult]:
    """Run one planned case; running out of memory is recorded as a skip, any other error propagates."""
    try:
        got = item.run()
    except MemoryError as exc:
        skips.append(Skip(item.suite, item.case, f"out of host memory ({exc}); run on a machine with more memory or use --quick"))
        return []
    except RuntimeError as exc:
        if "out of memory" not in str(exc).lower():
            raise
        skips.append(Skip(item.suite, item.case, f"out of device memory ({str(exc).splitlines()[0]}); use --quick or a smaller --model"))
        return []
    got = got if isinstance(got, list) else [got]
    skips += [g for g in got if isinstance(g, Skip)]  # a case may find at run time that it cannot run here
    return [g for g in got if not isinstance(g, Skip)]


def _release_memory(det) -> None:
    gc.collect()
    if any(b.is_cuda for b in det.backends):
        # lazy: optional (the torch extra): a host without it runs the numpy suites
        import torch

        torch.cuda.empty_cache()


def _gpu_topology(det) -> dict[str, Any] | None:
    """Bus ids, PCIe generation/width (max and current), NUMA node and `nvidia-smi topo -m` of the visible GPUs."""
    if not any(b.is_cuda for b in det.backends):
        return None
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    import torch


    try:
        return topology_facts(torch)
    except Exception as exc:  # noqa: BLE001 - facts are best effort; the run goes on without them
        return {"error": f"{type(exc).__name__}: {exc}"}


def _numpy_version() -> str:
    return numpy.__version__
