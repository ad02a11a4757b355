"""Write the small trace samples in tests/data/traces/ (run once; the outputs are committed).

Every row is made up here with a seeded generator, in the exact byte layout of the published traces (the sources
are named in tests/data/README.md); no row comes from a real trace.
"""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def burstgpt(rng: np.random.Generator) -> str:
    """BurstGPT_1.csv layout: integer-valued seconds, two models, two log types, some failed rows (0 response tokens)."""
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    t = 5.0
    for i in range(48):
        t += float(rng.exponential(4.0))
        req = int(rng.integers(20, 1500))
        resp = 0 if i in (7, 30) else int(rng.integers(5, 400))  # two failed requests, as in BurstGPT_1.csv
        model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
        kind = "API log" if rng.random() < 0.4 else "Conversation log"
        lines.append(f"{int(t)},{model},{req},{resp},{req + resp},{kind}")
    return "\n".join(lines) + "\n"


def azure(rng: np.random.Generator, year: int) -> str:
    """2023: `2023-11-16 18:17:03.9799600` (7 fractional digits, no zone); 2024: `2024-05-10 00:00:00.009930+00:00`, and
    a stamp with a zero fraction written without it (`...+00:00`), as the 2024 files do."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = datetime(2023, 11, 16, 18, 17, 3, 979960) if year == 2023 else datetime(2024, 5, 10, 0, 0, 0, 9930, tzinfo=timezone.utc)
    for i in range(60):
        if i:
            t += timedelta(microseconds=int(rng.exponential(0.35) * 1e6))
        if year == 2024 and i == 20:
            t = t.replace(microsecond=0)
        n_in, n_out = int(rng.integers(10, 8000)), int(rng.integers(1, 300))
        if year == 2023:
            stamp = t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond:06d}" + str(int(rng.integers(0, 10)))
        else:
            stamp = t.strftime("%Y-%m-%d %H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "") + "+00:00"
        lines.append(f"{stamp},{n_in},{n_out}")
    return "\n".join(lines) + "\n"


def main() -> None:
    rng = np.random.default_rng(49)
    (HERE / "burstgpt_sample.csv").write_text(burstgpt(rng))
    (HERE / "azure_2023_code_sample.csv").write_text(azure(rng, 2023))
    (HERE / "azure_2024_conv_sample.csv").write_text(azure(rng, 2024))


if __name__ == "__main__":
    main()
