"""The digital twin of one deployment: scheduler settings + a step-time source → served-load predictions.

`TwinSpec` names the engine's scheduler (llama.cpp's llama-server today; the chapter's PD /
colocated deployment via `chapter_twin`) and where its times come from (harness.target.step_times).
For a seeded workload at an arrival rate, `predict_point` runs the discrete-event simulation
(harness.target.des) and returns capacity-relevant figures: throughput, TTFT p50/p90, TPOT p50,
E2E p50. `capacity` is the throughput at saturation (a backlog that never empties).
`save_twin` / `load_twin` write the spec as versioned JSON so the HTTP twin
(`python -m harness.target --twin FILE`) serves exactly what was predicted. All figures are simulated.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.errors import HarnessError
from harness.target.des import ArrivingRequest, ServedFigures, saturation_capacity, simulate, summarise_run
from harness.target.llama_server import LlamaServerScheduler, LlamaServerSettings
from harness.target.step_times import RooflineStepTimes, StepTimes
from harness.target.timeline import PREFIX_BLOCK_TOKENS

TWIN_SCHEMA_VERSION = 1
# Format history: 1 — first version (engine, settings, step_times {kind: roofline | calibrated}, model).


@dataclass(frozen=True)
class TwinSpec:
    """Everything the twin needs to stand in for one engine deployment."""

    engine: str  # "llama.cpp", "vllm", "sglang" or "trtllm" (the scheduler modelled)
    settings: Any  # LlamaServerSettings (llama.cpp), ChunkedPrefillSettings (vLLM, SGLang) or TrtllmSettings
    step_times: StepTimes
    model: str  # a name or GGUF path, for the report
    source: str  # where the step times came from (calibration run, constants)
    notes: tuple[str, ...] = field(default=())

    def make_scheduler(self) -> Any:
        if self.engine == "llama.cpp":
            return LlamaServerScheduler(self.settings, self.step_times)
        if self.engine in ("vllm", "sglang"):
            from harness.target.chunked_prefill import ChunkedPrefillScheduler  # noqa: PLC0415

            return ChunkedPrefillScheduler(self.settings, self.step_times)
        if self.engine == "trtllm":
            from harness.target.trtllm import TrtllmScheduler  # noqa: PLC0415

            return TrtllmScheduler(self.settings, self.step_times)
        raise HarnessError(f"the twin has scheduler models for llama.cpp, vllm, sglang and trtllm; engine {self.engine!r} has none.")

    @property
    def slots(self) -> int:
        """The most requests the engine runs at once."""
        return getattr(self.settings, "slots", None) or getattr(self.settings, "max_num_seqs")

    def to_dict(self) -> dict[str, Any]:
        st = self.step_times
        settings = self.settings.to_dict() if hasattr(self.settings, "to_dict") else asdict(self.settings)
        return {"schema_version": TWIN_SCHEMA_VERSION, "engine": self.engine, "settings": settings,
                "step_times": st.to_dict() if hasattr(st, "to_dict") else {"kind": type(st).__name__},
                "model": self.model, "source": self.source, "notes": list(self.notes)}


def twin_dict(spec: TwinSpec) -> dict[str, Any]:
    """The spec as JSON-able data, with the model's shape so a roofline source can be rebuilt."""
    d = spec.to_dict()
    st = spec.step_times
    if isinstance(st, RooflineStepTimes):
        d["step_times"]["model_spec"] = asdict(st.model)
    return d


def save_twin(spec: TwinSpec, path: str | Path) -> Path:
    """Write the spec as JSON (temporary name, then rename)."""
    d = twin_dict(spec)
    p = Path(path)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(d, indent=2, default=str))
    tmp.replace(p)
    return p


def load_twin(path: str | Path) -> TwinSpec:
    """Read a twin spec written by save_twin; errors name the field and the fix."""
    from harness.specs.models import ModelSpec  # noqa: PLC0415

    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as exc:
        raise HarnessError(f"twin spec {str(p)!r} cannot be read ({exc}); give the twin.json a loop run wrote.") from None
    except json.JSONDecodeError as exc:
        raise HarnessError(f"twin spec {p} is not valid JSON ({exc}); give the twin.json a loop run wrote.") from None
    v = d.get("schema_version") if isinstance(d, dict) else None
    if not isinstance(v, int) or v < 1:
        raise HarnessError(f"twin spec {p}: schema_version must be an integer >= 1, got {v!r}.")
    if v > TWIN_SCHEMA_VERSION:
        raise HarnessError(f"twin spec {p} has schema_version {v}, newer than this harness understands ({TWIN_SCHEMA_VERSION}); upgrade the harness.")
    try:
        if d["engine"] in ("vllm", "sglang"):
            from harness.target.chunked_prefill import ChunkedPrefillSettings  # noqa: PLC0415

            settings: Any = ChunkedPrefillSettings(**{**d["settings"], "assumptions": tuple(d["settings"].get("assumptions", ()))})
        elif d["engine"] == "trtllm":
            from harness.target.trtllm import TrtllmSettings  # noqa: PLC0415

            settings = TrtllmSettings(**{**d["settings"], "assumptions": tuple(d["settings"].get("assumptions", ()))})
        else:
            settings = LlamaServerSettings(**{k: v for k, v in d["settings"].items() if k != "n_ctx_slot"})
        st = d["step_times"]
        if st.get("kind") == "calibrated":
            from harness.target.step_times import calibrated_step_times  # noqa: PLC0415

            times = calibrated_step_times(st["calibration_file"], st["engine_settings"], proxy=bool(st.get("proxy")),
                                          bound=st.get("bound", "value"))
            return TwinSpec(d["engine"], settings, times, d["model"], d["source"], tuple(d.get("notes", ())))
        if st.get("kind") == "service-model":
            from harness.specs.gpus import get_gpu  # noqa: PLC0415
            from harness.model.stages import Efficiency  # noqa: PLC0415
            from harness.target.service_times import GpuServiceModel  # noqa: PLC0415
            from harness.target.step_times import ServiceModelStepTimes  # noqa: PLC0415

            svc = GpuServiceModel(get_gpu(st["gpu"]), ModelSpec(**st["model_spec"]), Efficiency(**st["efficiency"]),
                                  st["weight_bytes_per_param"], st["kv_bytes_per_elem"])
            return TwinSpec(d["engine"], settings, ServiceModelStepTimes(svc), d["model"], d["source"], tuple(d.get("notes", ())))
        if st.get("kind") == "gpu-roofline":
            from harness.model.stages import Efficiency  # noqa: PLC0415
            from harness.specs.gpus import get_gpu  # noqa: PLC0415
            from harness.target.step_times import GpuRooflineStepTimes  # noqa: PLC0415

            constants = None
            if st.get("calibration_file"):
                from harness.calibration.apply import MeasuredConstants  # noqa: PLC0415
                from harness.calibration.file import load_calibration  # noqa: PLC0415

                constants = MeasuredConstants(load_calibration(st["calibration_file"]), st["calibration_file"])
            times = GpuRooflineStepTimes(get_gpu(st["gpu"]), ModelSpec(**st["model_spec"]), st["dtype"], st["weight_bytes_per_param"],
                                         st["kv_bytes_per_elem"], constants, Efficiency(**st["efficiency"]), st.get("calibration_file"))
            return TwinSpec(d["engine"], settings, times, d["model"], d["source"], tuple(d.get("notes", ())))
        if st.get("kind") != "roofline":
            raise HarnessError(f"twin spec {p}: step_times.kind {st.get('kind')!r} cannot be rebuilt from JSON; known: roofline, calibrated, service-model, gpu-roofline.")
        model = ModelSpec(**st["model_spec"])
        times = RooflineStepTimes(model, st["flops_per_s"], st["bytes_per_s"], st["weight_bytes_per_param"],
                                  st["kv_bytes_per_elem"], st.get("source", "roofline"))
        return TwinSpec(d["engine"], settings, times, d["model"], d["source"], tuple(d.get("notes", ())))
    except (KeyError, TypeError) as exc:
        raise HarnessError(f"twin spec {p} is missing or has a bad field ({exc}); regenerate it with `harness loop cpu`.") from None


def llama_cpp_twin(cfg: Any, calibration: str, *, proxy: bool = False, gm: Any = None) -> TwinSpec:
    """The twin of a llama.cpp engine config (harness.engines.config.EngineConfig) with the engine's own step-time
    calibration: scheduler settings from the config (and its GGUF: sliding window, training context), step times
    from the calibration, whose family, threads and model are checked (harness.calibration.step_time; `proxy`
    lets a mismatch through, said in the notes). `gm`: the config's GGUF already read (read here when None)."""
    from harness.target.llama_server import settings_from_engine  # noqa: PLC0415
    from harness.target.step_times import calibrated_step_times  # noqa: PLC0415

    if gm is None:
        from harness.engines.llama_cpp import resolve_model  # noqa: PLC0415
        from harness.specs.gguf_model import read_gguf  # noqa: PLC0415

        gm = read_gguf(resolve_model(cfg))
    settings = settings_from_engine(cfg.options, cfg.base.server.extra_args, sliding_window=gm.sliding_window,
                                    n_ctx_train=gm.context_length)
    st = calibrated_step_times(calibration, cfg, proxy=proxy)
    notes = tuple(getattr(getattr(st, "model", None), "notes", ()) or ())
    return TwinSpec("llama.cpp", settings, st, gm.path, st.source, notes)


# ---- workloads as the twin sees them


def prefix_hashes(group: int, prefix_tokens: int) -> tuple[int, ...]:
    """Block hashes of a shared prompt prefix (the same blocks for the same group)."""
    if group < 0 or prefix_tokens < PREFIX_BLOCK_TOKENS:
        return ()
    return tuple(hash(("prefix", group, b)) for b in range(prefix_tokens // PREFIX_BLOCK_TOKENS))


def requests_from_rows(rows: Sequence[dict[str, Any]]) -> list[ArrivingRequest]:
    """A workload artifact's rows (intended_s, prompt_tokens_target, max_tokens, prefix_group, prefix_tokens)."""
    out = []
    for r in rows:
        t = r["intended_s"]
        if t is None or (isinstance(t, float) and math.isnan(t)):
            raise HarnessError("the twin simulates open-loop workloads; a multi-turn artifact (turns after a pause) is not supported yet.")
        out.append(ArrivingRequest(float(t), int(r["prompt_tokens_target"]), int(r["max_tokens"]),
                                   prefix_hashes(int(r.get("prefix_group", -1)), int(r.get("prefix_tokens", 0)))))
    return sorted(out, key=lambda a: a.arrival_s)


def requests_from_schedule(intended_s: Sequence[float], input_tokens: int, output_tokens: int) -> list[ArrivingRequest]:
    return [ArrivingRequest(float(t), int(input_tokens), int(output_tokens)) for t in intended_s]


def predict_point(make_scheduler: Callable[[], Any], requests: Sequence[ArrivingRequest], *, rate_per_s: float,
                  span_s: float, warmup_s: float = 0.0, cooldown_s: float = 0.0) -> ServedFigures:
    """Simulate the whole workload; figures over the window of intended sends [warmup_s, span_s − cooldown_s)."""
    w1 = max(warmup_s, span_s - cooldown_s)
    run = simulate(make_scheduler, requests, window=(warmup_s, w1))
    return summarise_run(run, rate_per_s)


def capacity(make_scheduler: Callable[[], Any], input_tokens: int, output_tokens: int, *, slots: int) -> tuple[float, float]:
    """(requests/s, output tokens/s) at saturation for one prompt/output shape: a long backlog, by the token estimator
    the loop's capacity measurement uses (harness.target.saturation)."""
    return saturation_capacity(make_scheduler, [(input_tokens, output_tokens)], n_requests=max(40, 12 * slots), by="tokens")
