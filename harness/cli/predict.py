"""Predict served TTFT/TPOT of a GPU deployment with the engine's twin in simulated time.

  harness predict --engine vllm --gpu h200-sxm --model llama-3.1-70b --precision fp8 --tp 8 --isl 1024 --osl 1024 --concurrency 64
  harness predict --engine trtllm --gpu h200-sxm --model path/to/config.json --tp 4 --isl 8192 --osl 1024 --rate 2.5
  harness predict --engine sglang --gpu h200-sxm --model deepseek-r1 --precision fp8-block --mode disagg \\
      --prefill-workers 1 --prefill-tp 8 --decode-workers 1 --decode-tp 8 --decode-batch 64 --isl 8192 --osl 1024 --concurrency 64
  harness predict --chapter workloads/scenarios/ch9-hetero-pd.toml --isl 8192 --osl 1025 --rate 3.5

Every figure is SIMULATED: the engine's scheduler (vLLM, SGLang, TensorRT-LLM) run over the workload with step
times from the per-operator step model and its constants (--calibration: the GPU's database entry, imported
kernel data, or the datasheet, said in the output with its age). Method and fields: docs/gpu-validation.md.
"""

from __future__ import annotations

import argparse
import sys

from harness.cli._output import print_json
from harness.errors import UsageError
from harness.model.parallel import Parallel
from harness.predict.deployment import Deployment, Workers, Workload
from harness.predict.predict import predict, predict_chapter
from harness.predict.render import render_point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    d = parser.add_argument_group("deployment")
    d.add_argument("--engine", choices=["vllm", "sglang", "trtllm"], help="the serving engine whose scheduler is simulated")
    d.add_argument("--gpu", help="GPU spec name (`harness specs gpus`), e.g. h200-sxm")
    d.add_argument("--model", help="catalog model (`harness specs models`), a Hugging Face config.json or a .gguf")
    d.add_argument("--precision", default="bf16", help="bf16, fp8, fp8-block, mxfp4 (gpt-oss experts), int4-wo "
                   "(weight-only experts); nvfp4/int8/int4 are refused with the reason (default bf16)")
    d.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"], help="KV cache dtype (default bf16)")
    d.add_argument("--mode", default="agg", choices=["agg", "disagg"], help="aggregated or disaggregated prefill/decode")
    d.add_argument("--tp", type=int, default=1, help="tensor-parallel cards per instance (agg; default 1)")
    d.add_argument("--ep", type=int, default=1, help="expert-parallel groups per instance (MoE; default 1)")
    d.add_argument("--instances", type=int, default=1, help="instances behind the router (agg; default 1)")
    d.add_argument("--max-batch", type=int, default=None, help="running requests per instance (default: the engine's)")
    d.add_argument("--max-num-tokens", type=int, default=None, help="tokens per step (default: the engine's)")
    d.add_argument("--chunked-prefill", choices=["on", "off"], default=None, help="override the engine's default")
    for role in ("prefill", "decode"):
        d.add_argument(f"--{role}-workers", type=int, default=1, help=f"{role} instances (disagg; default 1)")
        d.add_argument(f"--{role}-tp", type=int, default=1, help=f"cards per {role} instance (disagg; default 1)")
        d.add_argument(f"--{role}-ep", type=int, default=1, help=f"expert-parallel groups per {role} instance (default 1)")
        d.add_argument(f"--{role}-batch", type=int, default=None, help=f"running requests per {role} instance")
    d.add_argument("--kv-link", default="cx7-400g", help="link each prefill card sends its KV shard over (disagg; default cx7-400g)")
    w = parser.add_argument_group("workload")
    w.add_argument("--isl", type=int, help="input tokens per request")
    w.add_argument("--osl", type=int, help="output tokens per request")
    load = w.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, help="closed loop: N clients, each sending when its last request ends")
    load.add_argument("--rate", type=float, help="open loop: Poisson arrivals, requests per second")
    w.add_argument("--requests", type=int, default=None, help="measured requests (default 4 × concurrency, at least 64)")
    w.add_argument("--warmup-requests", type=int, default=None, help="unmeasured first requests (default 2 × concurrency)")
    w.add_argument("--range-ratio", type=float, default=0.0, help="lengths uniform in [(1-r)·L, (1+r)·L] (default 0: fixed)")
    w.add_argument("--below-ratio", type=float, default=None,
                   help="lengths uniform in [r·L, L] instead (benchmark_serving.py's --random-range-ratio, InferenceMAX 0.8)")
    w.add_argument("--seed", type=int, default=0, help="seed of the length draws and arrivals (default 0)")
    c = parser.add_argument_group("constants")
    c.add_argument("--calibration", default="auto", help="auto (database entry, else imported kernel data, else datasheet), "
                   "db, aic, none, or a calibration file (default auto)")
    c.add_argument("--kernel-data", default=None, metavar="DIR", help="aiconfigurator_core/systems/data to read (default: the installed package's)")
    parser.add_argument("--chapter", metavar="SCENARIO", default=None,
                        help="chapter mode: the scenario's deployment as Chapter 9 models it (FIFO pools, unchunked prefill, "
                             "roofline at the scenario's efficiency); --isl/--osl must be the scenario's")
    parser.add_argument("--allocation", default="best", help="chapter mode: best, or a reference allocation of the scenario")
    parser.add_argument("--json", action="store_true", help="print the prediction as JSON (fields: docs/gpu-validation.md)")


def _need(args: argparse.Namespace, *names: str) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is None]
    if missing:
        raise UsageError(f"harness predict needs {', '.join(missing)} (see `harness predict --help`).")


def main(args: argparse.Namespace) -> int:
    _need(args, "isl", "osl")
    if args.concurrency is None and args.rate is None:
        raise UsageError("harness predict needs --concurrency N (closed loop) or --rate R (open loop).")
    mode, ratio = ("below", args.below_ratio) if args.below_ratio is not None else ("symmetric", args.range_ratio)
    wl = Workload(args.isl, args.osl, concurrency=args.concurrency, rate_per_s=args.rate, requests=args.requests,
                  warmup_requests=args.warmup_requests, range_ratio=ratio, range_mode=mode, seed=args.seed)
    if args.chapter:
        point = predict_chapter(args.chapter, wl, allocation=args.allocation)
    else:
        _need(args, "engine", "gpu", "model")
        chunked = None if args.chunked_prefill is None else args.chunked_prefill == "on"
        if args.mode == "agg":
            dep = Deployment(args.engine, args.gpu, args.model, args.precision, args.kv_dtype, "agg",
                             Workers(args.instances, Parallel(tp=args.tp, ep=args.ep), args.max_batch),
                             max_num_tokens=args.max_num_tokens, chunked_prefill=chunked)
        else:
            roles = {r: Workers(getattr(args, f"{r}_workers"), Parallel(tp=getattr(args, f"{r}_tp"), ep=getattr(args, f"{r}_ep")),
                                getattr(args, f"{r}_batch")) for r in ("prefill", "decode")}
            dep = Deployment(args.engine, args.gpu, args.model, args.precision, args.kv_dtype, "disagg",
                             prefill=roles["prefill"], decode=roles["decode"], kv_link=args.kv_link,
                             max_num_tokens=args.max_num_tokens, chunked_prefill=chunked)
        point = predict(dep, wl, calibration=args.calibration, kernel_data=args.kernel_data)
    if args.json:
        print_json(point.to_dict())
    else:
        print(render_point(point))
    if point.rejected:
        print(f"warning: {point.rejected} requests were rejected by the simulated engine.", file=sys.stderr)
    return 0
