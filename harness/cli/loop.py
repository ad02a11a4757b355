"""Close the loop on the CPU: calibrate host constants, predict llama.cpp with the roofline, measure it, compare.

  harness loop cpu                              Gemma 3 270M on llama.cpp, prompt 512, batches 1..slots
  harness loop cpu --quick --reps 1             a fast pass (shorter calibration, one repetition)
  harness loop cpu --markdown docs/loop-cpu-result.md
  harness loop cpu --model PATH.gguf            any GGUF on the config's llama.cpp flags

Calibrates the host, predicts the isolated stages with the Chapter 9 roofline and the served load
(each mix at each arrival rate, as fractions of the predicted capacity) with the engine's digital
twin, measures both on the real engine with the load generator, and prints predicted vs measured
with the error; stores the run (kind loop-cpu) under --results. Method: docs/loop-cpu.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli._output import print_json
from harness.errors import HarnessError


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
        out = tuple((int(a), int(b)) for a, b in (x.split("/") for x in text.split(",") if x.strip()))
    except ValueError:
        raise HarnessError(f"--mixes must be INPUT/OUTPUT token pairs such as 512/64,128/256, got {text!r}.") from None
    return out


def _fractions(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HarnessError(f"--rates must be comma-separated fractions of the predicted capacity such as 0.2,0.5,0.8,1.2, got {text!r}.") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("target", choices=["cpu", "gpu"], help="which loop (cpu: llama.cpp on this host; gpu: vLLM / SGLang)")
    parser.add_argument("--gpu", default=None, help="gpu loop: the GPU spec the engine runs on (e.g. h100-sxm)")
    parser.add_argument("--model-spec", default=None, help="gpu loop: catalog model of the engine (default: the config's served name)")
    parser.add_argument("--dtype", default="bf16", help="gpu loop: weight dtype (bytes per parameter of the weight term; default bf16)")
    parser.add_argument("--target", dest="target_url", default=None, help="gpu loop: measure this running deployment (URL) instead of launching the config")
    parser.add_argument("--config", default=None, help="engine config (cpu default: llama-cpp-gemma3-270m; gpu: a vLLM or SGLang config)")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="prompt length for prefill and TTFT (default 512)")
    parser.add_argument("--decode-prompt-tokens", type=int, default=32, help="prompt length of the decode requests (default 32)")
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens generated per decode request (default 64)")
    parser.add_argument("--batches", default=None, help="decode batch sizes = concurrent requests (default: every batch from 1 to "
                        "the engine's slots, 1,2,3,4 with 4: the engine's step is not monotonic in the batch, so no batch is interpolated)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each stage measurement; the median is reported (default 3, 1 with --quick)")
    parser.add_argument("--model", default=None, help="a .gguf file to serve instead of the config's model (any GGUF)")
    parser.add_argument("--calibration", default=None, help="cpu: the engine's step-time calibration (`harness step-time fit`); gpu: a "
                        "`harness calibrate` file for the GPU. Default: cpu uses this run's host constants, gpu the datasheet (uncalibrated)")
    parser.add_argument("--proxy", action="store_true", help="allow a calibration of another kernel family, thread count or model (the report says so)")
    parser.add_argument("--mixes", default="512/64,128/256", help="served-load prompt/output token mixes (default: %(default)s)")
    parser.add_argument("--rates", default="0.2,0.5,0.8,1.2", help="arrival rates as fractions of the predicted capacity (default: %(default)s)")
    parser.add_argument("--point-duration-s", type=float, default=None, help="seconds of load per served point (cpu: default 50, 8 with --quick; gpu: 60, 10 with --quick)")
    parser.add_argument("--capacity-requests", type=int, default=None,
                        help="cpu: requests of the capacity burst per mix, sent at once; the capacity is the output tokens between the "
                             "20th and 80th percentile completion over the mean output, predicted for the same requests (default 5 x slots; "
                             "0 = no burst, the default with --quick: capacity is then read from the overloaded point)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="cpu: measure each served point's workload and each capacity burst this many times back to back "
                             "(1-10); the median is compared, each judged figure's spread over the repeats is shown beside its "
                             "error, and the verdict says how often one repeat reproduces another within target on this host "
                             "(default 1)")
    parser.add_argument("--probe", action="store_true",
                        help="cpu: time a 24-token batch-1 request after the stages and before each served point, and scale the "
                             "twin's steps for that point by it (experimental: it did not help on 2026-12-01, docs/loop-cpu.md)")
    parser.add_argument("--stage-windows", type=int, default=None,
                        help="cpu: measure the isolated stages this many times over the loop (1-10): before the served points, "
                             "between them and after the last; each point is predicted from the median of the windows' corrections "
                             "(default 3; 1 with --quick or --probe)")
    parser.add_argument("--time-budget-min", type=float, default=None,
                        help="cpu: the loop's wall-time budget in minutes (default 15, 3 with --quick; 0 = none). After the first "
                             "stage window the rest is predicted and, to fit, cut in order: the later stage windows, the capacity "
                             "bursts, the served points' duration (never below 70 %% of its default), and with --quick the rates per mix "
                             "(down to 1 a mix: the highest, which gives the capacity); a value you set with --stage-windows, "
                             "--capacity-requests or --point-duration-s, or a --rates other than the default, is not cut")
    parser.add_argument("--copy-cases", action=argparse.BooleanOptionalAction, default=None,
                        help="cpu: measure the host-RAM prompt cache's copy of a slot state in the first stage window (default: "
                             "yes, no with --quick, where it took ~23 of Gemma's 100-s window for a term of 0.5-16 ms a request that run, 38-71 ms on 2026-12-02)")
    parser.add_argument("--sentinel", action=argparse.BooleanOptionalAction, default=None,
                        help="cpu: run the host sentinel beside the engine (default: yes): a separate process reads 64 MiB every "
                             "0.5 s and times it on its own CPU clock; each point is predicted again with every step time × its "
                             "speed during the point over the stage windows' (held out: host telemetry, no served data), shown "
                             "beside the verdict")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (arrivals and prompts; the twin replays the same)")
    parser.add_argument("--no-stages", action="store_true", help="skip the isolated prefill/decode measurements")
    parser.add_argument("--no-served", action="store_true", help="skip the served-load points")
    parser.add_argument("--quick", action="store_true", help="short calibration budget, short served points (cpu 8 s, gpu 10 s), one repetition")
    parser.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="do not write a run")
    parser.add_argument("--markdown", default=None, help="also write the report as Markdown to this file")
    parser.add_argument("--log-dir", default=None, help="where llama-server's log goes (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    from harness.loop.render import render_markdown  # noqa: PLC0415

    rep = _gpu(args) if args.target == "gpu" else _cpu(args)
    md = render_markdown(rep)
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


def _cpu(args: argparse.Namespace):
    from harness.loop.run import LoopOptions, run_loop  # noqa: PLC0415

    if args.target_url:
        raise HarnessError("--target is for `harness loop gpu`; the CPU loop launches llama.cpp from --config itself.")
    opts = LoopOptions(
        config=args.config or "llama-cpp-gemma3-270m", model=args.model, calibration=args.calibration, proxy=args.proxy,
        prompt_tokens=args.prompt_tokens, decode_prompt_tokens=args.decode_prompt_tokens,
        output_tokens=args.output_tokens, batches=_batches(args.batches) if args.batches else None, reps=1 if args.quick and args.reps == 3 else args.reps,
        quick=args.quick, stages=not args.no_stages, served=not args.no_served, mixes=_mixes(args.mixes),
        rate_fractions=_fractions(args.rates), point_duration_s=args.point_duration_s, seed=args.seed,
        capacity_requests=args.capacity_requests, probe=args.probe, repeats=args.repeats,
        time_budget_s=None if args.time_budget_min is None else args.time_budget_min * 60.0, copy_cases=args.copy_cases,
        sentinel=args.sentinel is not False, stage_windows=args.stage_windows, results_dir=None if args.no_store else args.results, log_dir=args.log_dir, command_line=("harness", *sys.argv[1:]),
    )
    return run_loop(opts)


def _gpu(args: argparse.Namespace):
    from harness.loop.gpu import GpuLoopOptions, run_gpu_loop  # noqa: PLC0415

    if (args.repeats != 1 or args.probe or args.stage_windows is not None or args.time_budget_min is not None
            or args.copy_cases is not None or args.sentinel is not None):
        raise HarnessError("--repeats, --probe, --stage-windows, --time-budget-min, --copy-cases and --sentinel are for `harness loop cpu`; the GPU loop "
                           "measures each point once.")
    if args.capacity_requests is not None:
        raise HarnessError("--capacity-requests is for `harness loop cpu`; the GPU loop reads capacity from its overloaded point.")
    if not args.config or not args.gpu:
        raise HarnessError("`harness loop gpu` needs --config (a vLLM or SGLang engine config) and --gpu (its GPU spec, e.g. h100-sxm).")
    opts = GpuLoopOptions(
        config=args.config, gpu=args.gpu, model_spec=args.model_spec, calibration=args.calibration, dtype=args.dtype,
        target_url=args.target_url, mixes=_mixes(args.mixes), rate_fractions=_fractions(args.rates),
        point_duration_s=args.point_duration_s or (10.0 if args.quick else 60.0), seed=args.seed,
        results_dir=None if args.no_store else args.results, log_dir=args.log_dir, command_line=("harness", *sys.argv[1:]),
    )
    return run_gpu_loop(opts)
