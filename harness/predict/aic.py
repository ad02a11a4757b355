"""aiconfigurator's own prediction of a silicon row, run beside ours in the same command (`harness validate silicon`).

Each row is estimated the way aiconfigurator's `tools/accuracy_regression_testing/predict_silicon_sample.py` does:
`aiconfigurator.cli.api.cli_estimate` with the row's model, system, engine, quantization, ISL/OSL and parallel
sizes (aggregated: the row's batch size; disaggregated: the per-role sizes, batches and worker counts, refused
by aiconfigurator when the row leaves them out). Three facts of aiconfigurator 0.12.0 are handled here:

- it refuses the rows' own engine versions (its kernel database holds other ones): every call uses its default
  database version (`backend_version=None`), as its script falls back to;
- four of the rows' model paths are not bundled with it and it would download them: they are mapped to the bundled
  config of the same architecture (`MODEL_PATH_ALIASES`), so no network is used;
- each call looks up the newest database version by parsing ~500 YAML files (≈1.75 s a row): that lookup is
  memoised per (system, engine) for the process (the files do not change while it runs).

Its printing goes to a sink; its errors come back as the row's refusal reason.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError

AIC_VERSION = "0.12.0"  # the version whose behaviour this module handles (pip install 'aiconfigurator==0.12.0')
MODEL_PATH_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}
PARALLEL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
DISAGG_FIELDS = tuple(f"{stage}_{f}" for stage in ("prefill", "decode") for f in (*PARALLEL_FIELDS, "batch_size", "num_workers"))
REQUIRED_DISAGG = ("prefill_batch_size", "prefill_num_workers", "decode_batch_size", "decode_num_workers")


@dataclass(frozen=True)
class AicEstimate:
    ttft_s: float | None
    tpot_s: float | None
    refused: str | None = None


_API: Any = None


def _api() -> Any:
    """aiconfigurator's cli_estimate, with the database-version lookup memoised (imported on first use: ~4 s)."""
    global _API
    if _API is None:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                from aiconfigurator.cli.api import cli_estimate  # noqa: PLC0415
                import aiconfigurator_core.sdk.perf_database as pdb  # noqa: PLC0415
        except ImportError:
            raise HarnessError("the side-by-side needs aiconfigurator: pip install 'aiconfigurator==0.12.0' "
                               "(or run with --no-aic).") from None
        if not hasattr(pdb.get_latest_database_version, "cache_info"):
            pdb.get_latest_database_version = functools.lru_cache(maxsize=None)(pdb.get_latest_database_version)
        for name in ("aiconfigurator", "aiconfigurator_core"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _API = cli_estimate
    return _API


def _num(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def estimate_args(row: dict[str, Any]) -> dict[str, Any]:
    """The cli_estimate arguments of a silicon row (its own fields; the default database version)."""
    fields = ("batch_size", *PARALLEL_FIELDS) if row["mode"] == "agg" else DISAGG_FIELDS
    args = dict(model_path=MODEL_PATH_ALIASES.get(row["model_path"], row["model_path"]), system_name=row["system"],
                mode=row["mode"], backend_name=row["backend"], backend_version=None, isl=int(row["isl"]),
                osl=int(row["osl"]), gemm_quant_mode=row.get("gemm_quant_mode") or None,
                moe_quant_mode=row.get("moe_quant_mode") or None)
    for f in fields:
        v = _num(row.get(f))
        if v is not None:
            args[f] = v
    return args


@functools.lru_cache(maxsize=None)
def _estimate_cached(key: tuple) -> AicEstimate:
    args = dict(key)
    if args["mode"] == "disagg":
        missing = [f for f in REQUIRED_DISAGG if args.get(f) is None]
        if missing:
            return AicEstimate(None, None, f"aiconfigurator needs {', '.join(missing)} for a disaggregated row")
    cli = _api()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            r = cli(**args)
    except Exception as exc:  # aiconfigurator's own refusals, whatever their type: the row's reason
        return AicEstimate(None, None, f"aiconfigurator: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    ttft, tpot = getattr(r, "ttft", None), getattr(r, "tpot", None)
    if ttft is None or tpot is None or not (math.isfinite(ttft) and math.isfinite(tpot)):
        return AicEstimate(None, None, "aiconfigurator returned no TTFT/TPOT")
    return AicEstimate(float(ttft) * 1e-3, float(tpot) * 1e-3)


def aic_estimate(row: dict[str, Any]) -> AicEstimate:
    """aiconfigurator's TTFT / TPOT (seconds) of the row, or the reason it refuses it."""
    return _estimate_cached(tuple(sorted(estimate_args(row).items())))
