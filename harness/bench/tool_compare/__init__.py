"""Client CPU per streamed token: our load generator against guidellm (and AIPerf), same machine, same target.

Method (docs/loadgen-speed.md, "Comparison with guidellm, AIPerf, inference-perf"):

* Workload for every tool: the embedded target in its fixed-timing profile (`python -m harness.target
  --profile fixed --ttft-s 0 --itl-s 0`: each stream written whole, one token per SSE event, `usage` in the
  last chunk), started fresh for each run on 127.0.0.1; streaming `/v1/completions`, prompt 128 tokens,
  output 4096 tokens, concurrency 32, 256 requests = 1,048,576 streamed tokens (all configurable).
* The tool's command runs as a child of this process. Every ~0.1 s a sampler
  1. sums utime+stime+cutime+cstime (`/proc/<pid>/stat`) over the command's whole process tree (children
     found through the ppid field of every `/proc/<pid>/stat`; a process once in the tree stays in it, and
     one that was orphaned and then vanished keeps its last figure, so no CPU is lost to re-parenting);
  2. reads the target's counters: `/harness/info` (requests received) and `/metrics`
     (`vllm:request_success_total`, `vllm:generation_tokens_total`);
  3. sums the bytes queued (Recv-Q + Send-Q, as `ss -tn` shows them) in every loopback TCP socket to or
     from the target's port, from `/proc/net/tcp` (the sampler's own connection excluded);
  4. reads the tree's CPU again.
* **Load window**: from the last sample before the target received its first request (CPU read before the
  counters) to the first sample at which every request had finished and no byte was left in any socket
  queue, i.e. the client had read every event (CPU read after the queues). Window CPU is thus never
  under-counted; the sampling step bounds the over-count.
* **Whole command**: the rusage of the command and its reaped descendants from exec to exit (`wait4`):
  imports, data generation, tokenizer loading, the load, post-processing and reports.
* Tokens per client CPU second = tokens / CPU s, tokens = requests x output tokens, checked on the target
  (`vllm:generation_tokens_total`, `vllm:request_success_total`) and in each tool's own report where it has one.
  For ours the in-process figure (`summary.json` -> `client_process`, load process + part writer) is
  reported next to the sampler's.
* Before every run the sampler waits (up to `--quiet-timeout-s`) until the 1-minute load average is below
  `--max-loadavg` and the CPUs are less than `--max-busy-pct` busy over 3 s (`/proc/stat`); it records what it
  found and whether it ever got quiet.
* `--rounds N` runs the tools round-robin (ours, guidellm, aiperf), N times; the JSON holds every run, best
  and median per tool, and ours / best other (best vs best, median vs median, and per round).

* `--server token` replaces the target by the one-token-per-write server (harness.bench.token_server: one `send` per
  token at `--server-itl-s`, default 1 ms; `--server-cpu` pins it), the way real servers write; same window and checks.
* `--mode light` (issue 17's light-load comparison): the token server with its emit log (TTFT 100 ms, ITL 20 ms),
  2 requests/s at a constant rate (`--rate-per-s`), 300 requests x 50 tokens; per tool, its own per-request TTFT
  minus the server's TTFT (emit of token 0 − the instant the request was read), paired by response id where the tool
  records one, by quantile where it does not (`light`; summary `light_client_minus_server_ttft_ms`).

Run: .venv/bin/python -m harness.bench.tool_compare --guidellm /work/peers/guidellm/bin/guidellm \
         --aiperf /work/peers/aiperf/bin/aiperf --rounds 4 --out /tmp/tool_compare.json [--server token]
(the tools in their own virtualenvs: `pip install torch==2.13.0 guidellm==0.8.1`, `pip install aiperf==0.13.0`;
without --tokenizer a word-level one is written with write_word_tokenizer).
Tools whose executable is not given are skipped; ours always runs unless `--tools` leaves it out.

Modules: `adapters` (one adapter per tool: its command, environment and report; the registry ADAPTERS),
`sampling` (the sampled run of one command and its load window), `run` (one run of one tool), `light` (client
minus server TTFT), `stats`
(best / median, ours / best other), `tokenizer` (the word-level tokenizer), `cli` (flags, `main`). The /proc
accounting is harness.telemetry.proc.
"""

from harness.bench.tool_compare.adapters import ADAPTERS, TOOLS, Tools, ToolAdapter, Workload, adapter
from harness.bench.tool_compare.cli import main, parser, validate
from harness.bench.tool_compare.run import one_run
from harness.bench.tool_compare.sampling import LoadWindow, Sample, TargetPoller, find_load_window, run_sampled
from harness.bench.tool_compare.stats import best_median, ratios, summarise
from harness.bench.tool_compare.tokenizer import write_word_tokenizer
from harness.telemetry.proc import (CLK_TCK, ProcessTreeCpu, ProcStat, busy_pct, parse_cpu_line, parse_proc_net_tcp,
                                    parse_proc_stat)

__all__ = ["ADAPTERS", "CLK_TCK", "LoadWindow", "ProcStat", "ProcessTreeCpu", "Sample", "TOOLS", "TargetPoller", "ToolAdapter",
           "Tools", "Workload", "adapter", "best_median", "busy_pct", "find_load_window", "main", "one_run", "parse_cpu_line",
           "parse_proc_net_tcp", "parse_proc_stat", "parser", "ratios", "run_sampled", "summarise", "validate",
           "write_word_tokenizer"]
