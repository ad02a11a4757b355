"""`--calibration FILE` of bench-pd: the file turned into the digital twin of the target, every fact checked.

FILE is one of
- a twin spec, `twin.json` (written by `harness loop cpu|gpu` into its run; self-contained: scheduler settings and
  step times). With an engine config (`--engine-config`, or the config `harness engine` launched) the twin's engine
  and scheduler settings must be the config's.
- an engine step-time calibration, `calibration/<machine>.step-time.json` (`harness step-time fit`): step times
  only, so the engine's scheduler settings come from `--engine-config NAME` (a llama.cpp engine config), which is
  then required. The kernel family, thread count and model are checked by harness.calibration.step_time.

The host: a twin measured on another CPU does not predict this one. When the target runs on this host (a
loopback URL, or the engine `harness engine` launched), the calibration's machine must be this host's; a
target elsewhere cannot be checked, and the prediction says so. `proxy` lets each mismatch through, said
in the notes (PROXY: ...). Every refusal names the field, the two values and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.errors import HarnessError
from harness.target.prediction import PredictionSource

STEP_TIME_FORMAT = "harness-step-time"  # harness.calibration.step_time.FORMAT
GPU_CALIBRATION_FORMAT = "harness-calibration"  # harness.calibration.file.FORMAT
HOW = ("give the twin.json a `harness loop cpu` run wrote (results/<machine>/<run_id>/twin.json) or an engine step-time "
       "calibration (calibration/<machine>.step-time.json from `make step-time`) with --engine-config NAME")


@dataclass(frozen=True)
class TargetTwin:
    """The twin that predicts the target, where it came from, and what the prediction must say about it."""

    spec: Any  # harness.target.twin.TwinSpec
    source: PredictionSource
    notes: tuple[str, ...]


def is_local_url(url: str | None) -> bool:
    """The URL names this host (loopback): the target's host is this machine."""
    if not url:
        return False
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def load_target_twin(path: str, *, engine_config: Any = None, proxy: bool = False, target_local: bool = False,
                     flag: str = "--calibration") -> TargetTwin:
    """The twin of `path` (a twin.json or a step-time calibration) for the target; `engine_config`: a name, a path or an
    EngineConfig (required for a step-time calibration)."""
    from harness.store import read_json_file  # noqa: PLC0415

    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"{flag} {path!r} does not exist; {HOW}.")
    d = read_json_file(p, "twin.json or step-time calibration", HOW)
    if not isinstance(d, dict):
        raise HarnessError(f"{flag} {path}: the file holds a JSON {type(d).__name__}, not an object; {HOW}.")
    cfg = _engine_config(engine_config)
    if d.get("format") == STEP_TIME_FORMAT:
        return _from_step_time(p, cfg, proxy, target_local, flag)
    if d.get("format") == GPU_CALIBRATION_FORMAT:
        raise HarnessError(f"{flag} {path} is a GPU calibration (`harness calibrate`), which holds constants, not a twin; "
                           f"`harness loop gpu --calibration {path}` builds the engine's twin and writes its twin.json: give that.")
    if {"engine", "settings", "step_times"} <= set(d):
        return _from_twin_json(p, d, cfg, proxy, target_local, flag)
    raise HarnessError(f"{flag} {path} is neither a twin.json (fields engine, settings, step_times) nor a step-time calibration "
                       f"(\"format\": \"{STEP_TIME_FORMAT}\"); it has the fields {', '.join(sorted(d)[:8]) or 'none'}. {HOW[0].upper()}{HOW[1:]}.")


def _engine_config(engine_config: Any) -> Any:
    if engine_config is None or not isinstance(engine_config, (str, Path)):
        return engine_config
    from harness.engines.config import load_engine_config  # noqa: PLC0415

    return load_engine_config(engine_config)


def _from_step_time(p: Path, cfg: Any, proxy: bool, target_local: bool, flag: str) -> TargetTwin:
    from harness.calibration.step_time import load_step_time  # noqa: PLC0415
    from harness.target.twin import llama_cpp_twin  # noqa: PLC0415

    if cfg is None:
        raise HarnessError(f"{flag} {p} is a step-time calibration: it holds the engine's step times but not its scheduler "
                           "(slots, context, batch sizes); give --engine-config NAME, the llama.cpp engine config the target runs "
                           "(a TOML file or a name in workloads/engines/, e.g. llama-cpp-gemma3-270m). No default is assumed.")
    if cfg.engine != "llama.cpp":
        raise HarnessError(f"--engine-config {cfg.name!r} is for {cfg.engine!r}; a step-time calibration is fitted for llama.cpp. "
                           "Give a llama.cpp engine config, or for vLLM / SGLang the twin.json of `harness loop gpu`.")
    cal = load_step_time(p)
    notes = list(_host_notes(cal.machine, str(p), proxy, target_local))
    spec = llama_cpp_twin(cfg, str(p), proxy=proxy)  # family, threads and model are checked here (PROXY notes in spec.notes)
    src = PredictionSource("step-time", str(p), spec.engine, spec.model, spec.source, cfg.source, cal.machine, proxy)
    return TargetTwin(spec, src, tuple(notes))


def _from_twin_json(p: Path, d: dict[str, Any], cfg: Any, proxy: bool, target_local: bool, flag: str) -> TargetTwin:
    from harness.target.twin import load_twin  # noqa: PLC0415

    spec = load_twin(p)  # version, fields and a calibrated twin's own checks
    notes: list[str] = []
    if cfg is not None:
        if cfg.engine != spec.engine:
            raise HarnessError(f"{flag} {p}: the twin is of a {spec.engine} engine (field engine) but the engine config "
                               f"{cfg.name!r} runs {cfg.engine}; give the twin.json of a loop run of {cfg.name} (`harness loop "
                               f"{'cpu' if cfg.engine == 'llama.cpp' else 'gpu'} --config {cfg.name}`).")
        for field, twin_v, cfg_v in _settings_differences(spec, cfg):
            msg = (f"{flag} {p}: the twin's settings.{field} is {twin_v!r} but engine config {cfg.name!r} sets {cfg_v!r}")
            if not proxy:
                raise HarnessError(f"{msg}; the twin schedules another engine. Rerun `harness loop` with this config to make its "
                                   "twin, or pass --proxy to predict with this one anyway.")
            notes.append(f"PROXY: {msg[len(flag) + 1:]}")
    machine = _twin_machine(p, d)
    notes += _host_notes(machine, str(p), proxy, target_local)
    src = PredictionSource("twin.json", str(p), spec.engine, spec.model, spec.source, cfg.source if cfg is not None else None,
                           machine, proxy)
    return TargetTwin(spec, src, tuple(notes))


def _settings_differences(spec: Any, cfg: Any) -> list[tuple[str, Any, Any]]:
    """(field, twin's value, the config's value) for each scheduler setting the two disagree on."""
    o = cfg.options
    if spec.engine == "llama.cpp":
        want = {"slots": o.parallel, "ctx_size": o.ctx_size, "batch_size": o.batch_size, "ubatch_size": o.ubatch_size,
                "cont_batching": o.cont_batching}
    else:
        from harness.target.chunked_prefill import settings_from_sglang, settings_from_vllm  # noqa: PLC0415

        s = settings_from_vllm(o) if cfg.engine == "vllm" else settings_from_sglang(o)
        want = {k: getattr(s, k) for k in ("max_num_seqs", "max_num_batched_tokens", "mixed", "prefix_caching")}
    return [(k, getattr(spec.settings, k, None), v) for k, v in want.items() if getattr(spec.settings, k, None) != v]


def _twin_machine(p: Path, d: dict[str, Any]) -> str | None:
    """The host the twin's constants were measured on: its step-time calibration's machine, else the loop run's."""
    st = d.get("step_times") or {}
    if st.get("kind") == "calibrated" and st.get("calibration_file"):
        from harness.calibration.step_time import load_step_time  # noqa: PLC0415

        return load_step_time(st["calibration_file"]).machine
    if (p.parent / "manifest.json").is_file():
        from harness.store import Run  # noqa: PLC0415

        return Run(p.parent).manifest.machine
    return None


def _cpu_part(machine: str) -> str:
    return machine.split("--", 1)[-1]  # records.machine_fingerprint: "<gpu or cpu>--<cpu model slug>"


def _host_notes(machine: str | None, path: str, proxy: bool, target_local: bool) -> list[str]:
    from harness.records import machine_fingerprint  # noqa: PLC0415

    if machine is None:
        return [f"the host {path} was measured on is not recorded (a twin.json outside its loop run); it is assumed to be the target's"]
    if not target_local:
        return [f"the target is not on this host, so its host was not checked; the calibration's host {machine} is assumed"]
    here = machine_fingerprint()
    if _cpu_part(machine) == _cpu_part(here):
        return []
    msg = f"{path} was measured on {machine} (field machine) but the target runs on this host, {here}"
    if not proxy:
        raise HarnessError(f"--calibration {msg}; calibrate this host (`harness loop cpu`, or `make step-time`) or pass --proxy "
                           "to predict it with another host's constants.")
    return [f"PROXY: {msg}"]
