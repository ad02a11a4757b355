"""Close the loop: calibrate, predict with the digital twin, measure the real engine under load, compare.

  harness loop cpu                              Gemma 3 270M on llama.cpp on this host (about 15 min)
  harness loop cpu --quick                      a fast pass (about 3 min)
  harness loop cpu --model PATH.gguf            any GGUF on the config's llama.cpp flags
  harness loop gpu --config vllm-qwen3-8b --gpu h100-sxm [--target URL]

`harness loop cpu` calibrates the host, predicts the isolated stages with the Chapter 9 roofline and the served load
(each mix at each arrival rate, as fractions of the predicted capacity) with the engine's digital twin, measures both
on the real engine with the load generator (each point twice by default), and prints predicted against measured with
both verdicts; `harness loop gpu` does the same for a vLLM or SGLang config. Each run is stored (kind loop-cpu,
loop-gpu) under --results; `harness report RUN` renders it again. Method: docs/loop-cpu.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli._output import print_json
from harness.errors import HarnessError
from harness.loop.gpu import GpuLoopOptions, run_gpu_loop
from harness.loop.options import GpuTelemetryOptions
from harness.loop.run import LoopOptions, run_loop
from harness.report.loop import render_text
from workloads.extras_options import add_gpu_arguments


def _batches(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HarnessError(f"--batches must be comma-separated positive integers such as 1,2,4, got {text!r}.") from None
    if not out or any(b < 1 for b in out):
        raise HarnessError(f"--batches must be comma-separated positive integers such as 1,2,4, got {text!r}.")
    return out


def _mixes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple((int(a), int(b)) for a, b in (x.split("/") for x in text.split(",") if x.strip()))
    except ValueError:
        raise HarnessError(f"--mixes must be INPUT/OUTPUT token pairs such as 512/64,128/256, got {text!r}.") from None


def _fractions(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HarnessError(f"--rates must be comma-separated fractions of the predicted capacity such as 0.2,0.5,0.8,1.2, got {text!r}.") from None


def _common(p: argparse.ArgumentParser) -> None:
    """The flags both loops take."""
    p.add_argument("--mixes", default=None, help="served-load prompt/output token mixes (default: 512/64,128/256)")
    p.add_argument("--rates", default=None, help="arrival rates as fractions of the predicted capacity (default: 0.2,0.5,0.8,1.2)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (arrivals and prompts; the twin replays the same)")
    p.add_argument("--quick", action="store_true", help="a fast pass: short points (cpu: short calibration, 1 stage repetition)")
    p.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    p.add_argument("--no-store", action="store_true", help="do not write a run")
    p.add_argument("--markdown", default=None, help="also write the report as Markdown to this file")
    p.add_argument("--log-dir", default=None, help="where the engine's log goes (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_gpu_arguments(p.add_argument, during=" during the served points",
                      nvml_auto="when the engine runs on this host and NVML sees a GPU", choices=False)

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="loop_target", metavar="TARGET")
    sub.required = True
    cpu = sub.add_parser("cpu", help="llama.cpp on this host: calibrate, predict, measure, compare",
                         description="The CPU loop: llama.cpp on this host (docs/loop-cpu.md).")
    cpu.add_argument("--config", default="llama-cpp-gemma3-270m", help="llama.cpp engine config (default: %(default)s)")
    cpu.add_argument("--model", default=None, help="a .gguf file to serve instead of the config's model (any GGUF)")
    cpu.add_argument("--calibration", default=None, help="the engine's step-time calibration (`harness step-time fit`); "
                     "default: the roofline with this run's host constants")
    cpu.add_argument("--proxy", action="store_true", help="allow a calibration of another kernel family, thread count or model (the report says so)")
    cpu.add_argument("--prompt-tokens", type=int, default=512, help="prompt length for prefill and TTFT (default 512)")
    cpu.add_argument("--decode-prompt-tokens", type=int, default=32, help="prompt length of the decode requests (default 32)")
    cpu.add_argument("--output-tokens", type=int, default=64, help="tokens generated per decode request (default 64)")
    cpu.add_argument("--batches", default=None, help="decode batch sizes = concurrent requests (default: every batch from 1 to the "
                     "engine's slots: the engine's step is not monotonic in the batch, so no batch is interpolated)")
    cpu.add_argument("--reps", type=int, default=None, help="repetitions of each stage measurement; the median is reported (default 3, 1 with --quick)")
    cpu.add_argument("--point-duration-s", type=float, default=None, help="seconds of load per served point (default 50, 8 with --quick)")
    cpu.add_argument("--capacity-requests", type=int, default=None,
                     help="requests of the capacity burst per mix, sent at once; the capacity is the output tokens between the "
                          "20th and 80th percentile completion over the mean output, predicted for the same requests (default 5 × "
                          "slots; 0 = no burst, the default with --quick: capacity is then read at the overloaded point)")
    cpu.add_argument("--repeats", type=int, default=None,
                     help="measure each served point and capacity burst this many times back to back (1-10); the median is "
                          "compared and the repeatability verdict reads the repeats (default 2; when nothing else is left to "
                          "cut, the time budget repeats only some rates per mix, then none)")
    cpu.add_argument("--stage-windows", type=int, default=None,
                     help="measure the isolated stages this many times over the loop (1-10): before the served points, between "
                          "them and after the last; each point is predicted from the median of the windows' corrections "
                          "(default 3; 1 with --quick)")
    cpu.add_argument("--time-budget-min", type=float, default=None,
                     help="the loop's wall-time budget in minutes (default 15, 3 with --quick; 0 = none). After the first stage "
                          "window the rest is predicted and, to fit, cut in order: the later stage windows, the capacity bursts, "
                          "the served points' duration (never below 70 %% of its default), with --quick the rates per mix, then "
                          "the repeats; a part you set (--stage-windows, --capacity-requests, --point-duration-s, --rates, "
                          "--repeats) is not cut")
    cpu.add_argument("--copy-cases", action=argparse.BooleanOptionalAction, default=None,
                     help="measure the host-RAM prompt cache's copy of a slot state in the first stage window (default: yes, "
                          "no with --quick, where it costs a large share of the window for a term of a few ms a request)")
    cpu.add_argument("--no-stages", action="store_true", help="skip the isolated prefill/decode measurements")
    cpu.add_argument("--no-served", action="store_true", help="skip the served-load points")
    _common(cpu)
    cpu.set_defaults(_loop_main=main_cpu)

    gpu = sub.add_parser("gpu", help="vLLM or SGLang: the twin of its scheduler against the engine under load",
                         description="The GPU loop: a vLLM or SGLang config, launched or running (harness/loop/gpu.py).")
    gpu.add_argument("--config", required=True, help="a vLLM or SGLang engine config")
    gpu.add_argument("--gpu", required=True, help="the GPU spec the engine runs on (e.g. h100-sxm)")
    gpu.add_argument("--model-spec", default=None, help="catalog model of the engine (default: the config's served name)")
    gpu.add_argument("--dtype", default="bf16", help="weight dtype (bytes per parameter of the weight term; default bf16)")
    gpu.add_argument("--calibration", default=None, help="a `harness calibrate` file for the GPU (default: the datasheet, uncalibrated)")
    gpu.add_argument("--target", dest="target_url", default=None, help="measure this running deployment (URL) instead of launching the config")
    gpu.add_argument("--point-duration-s", type=float, default=None, help="seconds of load per served point (default 60, 10 with --quick)")
    gpu.add_argument("--repeats", type=int, default=None, help="measure each served point this many times back to back (1-10; default 1)")
    _common(gpu)
    gpu.set_defaults(_loop_main=main_gpu)


def main(args: argparse.Namespace) -> int:
    return args._loop_main(args)


def main_cpu(args: argparse.Namespace) -> int:
    opts = LoopOptions(
        config=args.config, model=args.model, calibration=args.calibration, proxy=args.proxy, prompt_tokens=args.prompt_tokens,
        decode_prompt_tokens=args.decode_prompt_tokens, output_tokens=args.output_tokens,
        batches=_batches(args.batches) if args.batches else None, reps=args.reps, quick=args.quick, stages=not args.no_stages,
        served=not args.no_served, mixes=_mixes(args.mixes) if args.mixes else None,
        rate_fractions=_fractions(args.rates) if args.rates else None, point_duration_s=args.point_duration_s,
        capacity_requests=args.capacity_requests, repeats=args.repeats, stage_windows=args.stage_windows,
        time_budget_s=None if args.time_budget_min is None else args.time_budget_min * 60.0, copy_cases=args.copy_cases,
        seed=args.seed, results_dir=None if args.no_store else args.results, log_dir=args.log_dir,
        command_line=("harness", *sys.argv[1:]),
        gpu_telemetry=GpuTelemetryOptions.from_flags(args.gpu_metrics_url, args.gpu_nvml, args.gpu_metrics_interval_s))
    return _show(run_loop(opts), args)


def main_gpu(args: argparse.Namespace) -> int:
    opts = GpuLoopOptions(
        config=args.config, gpu=args.gpu, model_spec=args.model_spec, calibration=args.calibration, dtype=args.dtype,
        target_url=args.target_url, mixes=_mixes(args.mixes) if args.mixes else None,
        rate_fractions=_fractions(args.rates) if args.rates else None, point_duration_s=args.point_duration_s,
        quick=args.quick, repeats=args.repeats, seed=args.seed, results_dir=None if args.no_store else args.results,
        log_dir=args.log_dir, command_line=("harness", *sys.argv[1:]),
        gpu_telemetry=GpuTelemetryOptions.from_flags(args.gpu_metrics_url, args.gpu_nvml, args.gpu_metrics_interval_s))
    return _show(run_gpu_loop(opts), args)


def _show(rep, args: argparse.Namespace) -> int:  # noqa: ANN001 - a LoopReport
    md = render_text(rep)
    if args.markdown:
        out = Path(args.markdown)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(md)
        except OSError as exc:
            raise HarnessError(f"--markdown {args.markdown!r} cannot be written ({exc}); give a writable file path.") from None
    if args.json:
        print_json(rep.to_dict())
    else:
        print(md, end="")
    return 0
