"""Serving engines the harness launches: one module per engine, a shared launcher core.

ENGINES maps the `engine` field of an engine config (workloads/engines/*.toml, format in
docs/engines.md) to the module that turns the config into command lines; add one line per engine.
"""

from __future__ import annotations

ENGINES: dict[str, str] = {
    "llama.cpp": "harness.engines.llama_cpp",
    "vllm": "harness.engines.vllm",
    "sglang": "harness.engines.sglang",
}
