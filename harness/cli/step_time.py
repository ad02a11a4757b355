"""Calibrated step time of a real engine: fit it from llama.cpp's benchmarks, or predict with a fitted file.

  harness step-time fit results/<machine>/ --out calibration/<machine>.step-time.json
  harness step-time predict calibration/<machine>.step-time.json --prompt-tokens 512 --batch 4 --context 544
  harness step-time predict FILE --config llama-cpp-gemma3-270m [--proxy] ...

`fit` labels held-out points first (--holdout), fits t = α + bytes·s_byte + flops·s_flop per phase
and prints the constants with 95 % bootstrap intervals and the residuals of fitted and held-out
points. `predict` checks the engine's kernel family, threads and model against the calibration
(refused unless --proxy). Method: docs/model.md "Calibrated step time".
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.calibration import step_time as st
from harness.calibration.file import DEFAULT_DIR
from harness.cli._output import print_json
from harness.engines.config import load_engine_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    f = sub.add_parser("fit", help="fit the step-time constants from llama.cpp micro runs")
    f.add_argument("results", help="results/<machine>/ (or one run directory) holding `harness micro-llama-cpp` runs")
    f.add_argument("--out", metavar="FILE", help="file to write (default calibration/<machine>.step-time.json)")
    f.add_argument("--holdout", default="every-3rd", choices=["every-3rd", "none"],
                   help="which batched-bench points to hold out (llama-bench points are always held out)")
    f.add_argument("--form", default="overlap", choices=["overlap", "additive"],
                   help="decode form: overlap fits the exponent p of ((W·s_byte)^p + (F·s_flop)^p)^(1/p); additive fixes p = 1")
    f.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    f.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples (default 200)")
    f.add_argument("--json", action="store_true", help="print the whole record as JSON")
    p = sub.add_parser("predict", help="prefill and decode step times from a step-time calibration")
    p.add_argument("calibration", help="a file written by `harness step-time fit`")
    p.add_argument("--config", help="llama.cpp engine config to check the calibration against (family, threads, model)")
    p.add_argument("--family", help="the engine's kernel family, e.g. ggml-q4_K_M-cpu (default: the calibration's)")
    p.add_argument("--threads", type=int, help="the engine's threads (default: the calibration's)")
    p.add_argument("--proxy", action="store_true", help="allow a calibration of another family, thread count or model")
    p.add_argument("--prompt-tokens", type=int, action="append", default=None, help="prefill length (repeatable)")
    p.add_argument("--cached-tokens", type=int, default=0, help="tokens already cached before the prompt (default 0)")
    p.add_argument("--batch", type=int, action="append", default=None, help="decode batch (repeatable)")
    p.add_argument("--context", type=float, default=512.0, help="mean decode context per sequence (default 512)")
    p.add_argument("--json", action="store_true")


def main(args: argparse.Namespace) -> int:
    if args.action == "fit":
        cal = st.fit_from_runs(args.results, holdout=args.holdout, seed=args.seed, n_bootstrap=args.bootstrap, form=args.form)

        name = f"{cal.machine}.step-time.json"
        out = args.out or str(DEFAULT_DIR / name)
        if out.endswith(("/", "\\")) or Path(out).is_dir():  # a directory: <dir>/<machine>.step-time.json
            out = str(Path(out) / name)
        path = st.save_step_time(cal, out)
        if args.json:
            print_json(cal.to_dict())
        else:
            print("\n".join(st.summary_lines(cal)))
            print(f"  written to {path}")
        return 0
    cal = st.load_step_time(args.calibration)
    if args.config:
        eng = st.EngineSettings.from_engine_config(load_engine_config(args.config))
    else:
        eng = st.EngineSettings(args.family or cal.family, args.threads or cal.threads)
    m = st.step_time_model(cal, eng, proxy=args.proxy)
    rows = []
    for p in args.prompt_tokens or [512]:
        iv = m.prefill_s(p, args.cached_tokens)
        rows.append({"quantity": "prefill_s", "prompt_tokens": p, "cached_tokens": args.cached_tokens, **_iv(iv)})
    for b in args.batch or [1, 2, 4]:
        iv = m.decode_step_s(b, args.context)
        rows.append({"quantity": "decode_step_s", "batch": b, "context_tokens": args.context, **_iv(iv),
                     "decode_tokens_per_s": b / iv.value})
    if args.json:
        print_json({"predictions": rows, **m.describe()})
        return 0
    for n in m.notes:
        print(n)
    for w in cal.warnings:
        print(f"warning (from the calibration): {w}")
    for r in rows:
        what = (f"prefill {r['prompt_tokens']} tokens (cached {r['cached_tokens']})" if r["quantity"] == "prefill_s"
                else f"decode step, batch {r['batch']}, context {r['context_tokens']:g}")
        extra = f", {r['decode_tokens_per_s']:.1f} tokens/s" if "decode_tokens_per_s" in r else ""
        print(f"{what}: {r['value'] * 1e3:.2f} ms [{r['low'] * 1e3:.2f}, {r['high'] * 1e3:.2f}]{extra}")
    d = m.describe()["residuals"]
    for ph, s in d.items():
        ho = s["held-out"]
        if ho["n"]:
            print(f"  {ph}: held-out residual rms {ho['rms']:.1%} over {ho['n']} points (fit: {s['fit'].get('rms', float('nan')):.1%})")
    return 0


def _iv(iv) -> dict:
    return {"value": iv.value, "low": iv.low, "high": iv.high}
