"""One adapter per load-generation tool: how to run it against the target, in what environment, and what its own
report says it did. ADAPTERS is the registry, in the fixed round-robin order; a new tool is one more adapter."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.store import Run
from workloads.artifact import save_artifact
from workloads.config import LoadConfig
from workloads.mixes import single_turn
from workloads.schedule import burst, constant

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Workload:
    requests: int = 256
    input_tokens: int = 128
    output_tokens: int = 4096
    concurrency: int = 32
    rate_per_s: float | None = None  # None: `concurrency` streams in flight; a rate: requests sent at that constant rate

    @property
    def tokens(self) -> int:
        return self.requests * self.output_tokens


@dataclass
class Tools:
    guidellm: str | None = None
    aiperf: str | None = None
    tokenizer: str | None = None
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=lambda: {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                                                "HF_DATASETS_OFFLINE": "1"})


class ToolAdapter:
    """The default adapter; a tool overrides what differs."""

    name = ""
    needs_tokenizer = False  # the tool builds its prompts with a tokenizer (--tokenizer, or the word-level one)

    def given(self, tools: Tools) -> bool:
        """Whether this tool can run: its executable was given (ours always can)."""
        return getattr(tools, self.name, None) is not None

    def command(self, url: str, wl: Workload, tools: Tools, run_dir: Path) -> tuple[list[str], Path]:
        """(argv, cwd) of one run against `url`; prepares what the command reads (config, artifact)."""
        raise NotImplementedError

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        return env

    def report(self, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
        """What the tool itself says it did: requests completed and output tokens per request, where readable."""
        return {}

    def extra(self, rec: dict[str, Any], wl: Workload) -> dict[str, Any]:
        """More fields of the run's record, from what was measured (`rec`)."""
        return {}

    def ttfts_ms(self, run_dir: Path, stdout: str) -> list[tuple[str | None, float]]:
        """(response id, or None where the tool records none; TTFT in ms) of each successful request, from the tool's
        own per-request output (the light mode's client-minus-server TTFT)."""
        raise NotImplementedError


class Ours(ToolAdapter):
    name = "ours"

    def given(self, tools: Tools) -> bool:
        return True

    def command(self, url: str, wl: Workload, tools: Tools, run_dir: Path) -> tuple[list[str], Path]:
        sched = burst(wl.requests, 1e-9, 1.0) if wl.rate_per_s is None else constant(wl.rate_per_s, wl.requests / wl.rate_per_s)
        art = single_turn("cmp", sched, input_tokens=wl.input_tokens, output_tokens=wl.output_tokens, api="completions")
        run_id = f"cmp-{run_dir.name}-{time.strftime('%Y%m%dT%H%M%S')}"  # run directories are never overwritten
        cfg = LoadConfig(target_url=url, artifact_path=str(save_artifact(art, run_dir)), run_id=run_id,
                         results_dir=str(run_dir / "results"), model="harness-fixed", fetch_emit_log=False,
                         max_concurrency=wl.concurrency if wl.rate_per_s is None else wl.requests, progress=False,
                         request_timeout_s=120.0, drain_timeout_s=120.0)
        return [tools.python, "-m", "workloads.loadrun", str(cfg.save(run_dir / "load-config.json"))], REPO_ROOT

    @staticmethod
    def _run(stdout: str) -> Any:
        line = [ln for ln in stdout.splitlines() if ln.startswith('{"run_dir"')][-1]
        return Run(json.loads(line)["run_dir"])

    def report(self, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
        run = self._run(stdout)
        df = run.table("requests")
        ok = df[df["error_class"] == "ok"]
        cp = run.json("summary.json")["client_process"]
        chunks = int(ok["output_tokens_chunks"].sum())
        return {"requests_ok": int(len(ok)), "requests": int(len(df)), "chunks_recorded": chunks,
                "all_output_tokens_as_asked": bool((ok["output_tokens_chunks"] == wl.output_tokens).all()),
                "client_process": cp}

    def extra(self, rec: dict[str, Any], wl: Workload) -> dict[str, Any]:
        if "client_process" not in rec["tool_report"]:
            return {}
        cp = rec["tool_report"]["client_process"]
        return {"in_process": {"cpu_s": cp["cpu_s"], "part_writer_cpu_s": cp.get("part_writer_cpu_s"),
                               "tokens_per_cpu_s": wl.tokens / cp["cpu_s"] if cp["cpu_s"] else None,
                               "sampler_over_in_process": (rec["load_window"] or {}).get("cpu_s", 0.0) / cp["cpu_s"]
                               if cp["cpu_s"] else None}}


    def ttfts_ms(self, run_dir: Path, stdout: str) -> list[tuple[str | None, float]]:
        df = self._run(stdout).table("requests")
        ok = df[df["error_class"] == "ok"]
        return [(str(r), float(t) * 1e3) for r, t in zip(ok["response_id"], ok["ttft_s"])]


class Guidellm(ToolAdapter):
    name = "guidellm"
    needs_tokenizer = True

    def command(self, url: str, wl: Workload, tools: Tools, run_dir: Path) -> tuple[list[str], Path]:
        return [tools.guidellm or "guidellm", "run",
                "--backend", f"kind=openai_http,target={url},model=harness-fixed,request_format=/v1/completions",
                "--profile", (f"kind=concurrent,streams={wl.concurrency}" if wl.rate_per_s is None
                              else f"kind=constant,rate={wl.rate_per_s:g}"),
                "--constraint", f"kind=max_requests,count={wl.requests}",
                "--data", f"kind=synthetic_text,prompt_tokens={wl.input_tokens},output_tokens={wl.output_tokens}",
                "--tokenizer", f"kind=huggingface_auto,model={tools.tokenizer}",
                "--output", f"kind=json,path={run_dir / 'out.json'}", "--disable-console-interactive"], run_dir

    def report(self, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
        out_toks = guidellm_output_tokens(json.loads((run_dir / "out.json").read_text()))
        return {"requests_ok": len(out_toks),
                "all_output_tokens_as_asked": bool(out_toks) and all(t == wl.output_tokens for t in out_toks),
                "output_tokens_seen": sorted(set(out_toks))[:5]}


    def ttfts_ms(self, run_dir: Path, stdout: str) -> list[tuple[str | None, float]]:
        return [(r.get("response_id"), float(r["time_to_first_token_ms"])) for r in
                guidellm_successful(json.loads((run_dir / "out.json").read_text()))
                if r.get("time_to_first_token_ms") is not None]


def guidellm_successful(data: Any) -> list[dict[str, Any]]:
    """The successful requests of a guidellm JSON report (benchmarks[*].requests.successful[*])."""
    out = []
    for b in data.get("benchmarks", []) if isinstance(data, dict) else []:
        for r in ((b.get("requests") or {}).get("successful") or []) if isinstance(b, dict) else []:
            if isinstance(r, dict):
                out.append(r)
    return out


def guidellm_output_tokens(data: Any) -> list[Any]:
    """Output tokens of each successful request in a guidellm JSON report (benchmarks[*].requests.successful[*])."""
    return [r.get("output_tokens") for r in guidellm_successful(data)]


class Aiperf(ToolAdapter):
    name = "aiperf"
    needs_tokenizer = True

    def command(self, url: str, wl: Workload, tools: Tools, run_dir: Path) -> tuple[list[str], Path]:
        return [tools.aiperf or "aiperf", "profile", "--model", "harness-fixed", "--url", url,
                "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tools.tokenizer),
                "--isl", str(wl.input_tokens), "--isl-stddev", "0", "--osl", str(wl.output_tokens), "--osl-stddev", "0",
                *(["--concurrency", str(wl.concurrency)] if wl.rate_per_s is None else
                  ["--request-rate", f"{wl.rate_per_s:g}", "--request-rate-mode", "constant"]),
                "--request-count", str(wl.requests), "--use-server-token-count",
                "--ui-type", "none", "--artifact-dir", str(run_dir / "artifacts"), "--no-server-metrics",
                "--no-gpu-telemetry"], run_dir

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        # AIPerf 0.13.0 in offline mode looks a local tokenizer directory up as a hub cache entry and fails
        # ("Repo id must be in the form ..."); without it, a local path is loaded directly (nothing is fetched)
        return {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}

    def report(self, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
        files = sorted((run_dir / "artifacts").rglob("profile_export_aiperf.json"))
        if not files:
            return {"note": "no profile_export_aiperf.json found"}
        data = json.loads(files[-1].read_text())
        rc = data.get("request_count", {})
        osl = data.get("output_sequence_length", {})
        return {"requests_ok": rc.get("avg"), "output_tokens_min": osl.get("min"), "output_tokens_max": osl.get("max"),
                "all_output_tokens_as_asked": osl.get("min") == osl.get("max") == wl.output_tokens}


    def ttfts_ms(self, run_dir: Path, stdout: str) -> list[tuple[str | None, float]]:
        files = sorted((run_dir / "artifacts").rglob("profile_export.jsonl"))
        out: list[tuple[str | None, float]] = []
        for line in files[-1].read_text().splitlines() if files else []:
            rec = json.loads(line)
            m = (rec.get("metrics") or {}).get("time_to_first_token") or {}
            if rec.get("error") is None and m.get("unit") == "ms" and m.get("value") is not None:
                out.append((None, float(m["value"])))  # AIPerf records no response id: paired by quantile
        return out


# tool name -> adapter, in the round-robin order of a round
ADAPTERS: dict[str, ToolAdapter] = {a.name: a for a in (Ours(), Guidellm(), Aiperf())}
TOOLS = tuple(ADAPTERS)


def adapter(tool: str) -> ToolAdapter:
    try:
        return ADAPTERS[tool]
    except KeyError:
        raise HarnessError(f"unknown tool {tool!r}; give one of {', '.join(TOOLS)}.") from None


def tool_report(tool: str, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
    """The adapter's report, or a note saying why it could not be read."""
    try:
        return adapter(tool).report(run_dir, stdout, wl)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        return {"note": f"the tool's report could not be read: {type(exc).__name__}: {exc}"}
