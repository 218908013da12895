"""The cost of the record-time secret scan: milliseconds per KiB of item text, by kind of
text, beside the intake's unfiltered scan, and what it adds to ``engine.record``."""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.importers import load_trajectory
from ctxledger.adapters.security.secret_scan import SecretScanner
from ctxledger.domain.model import AgentIdentity, Source
from ctxledger.domain.settings import AgentSettings

__all__ = ["corpora", "run_secret_scan_cost"]


def _code(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    n = 0
    while sum(len(x) + 1 for x in lines) < size:
        n += 1
        lines += [
            f"def handle_{n}(request, session_id: int = {rng.randint(0, 999)}) -> Response:",
            f'    """Serve /api/v1/items/{n}; see docs/api.md#items."""',
            f"    rows = db.query(Item).filter(Item.owner == request.user).limit({n})",
            "    token = tokenizer.encode(request.body)  # the key is read from settings",
            f"    log.info('served %d rows in %.3f s', len(rows), {rng.random():.3f})",
            "    return Response(rows)",
            "",
        ]
    return "\n".join(lines)[:size]


def _log(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < size:
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(40))
        lines += [
            f"2026-12-04T12:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z INFO worker[{rng.randint(1, 9)}] "
            f"GET /v1/jobs/{rng.randint(1000, 9999)} 200 {rng.randint(1, 900)}ms",
            f"tests/unit/test_mod_{rng.randint(1, 99)}.py::test_case_{rng.randint(1, 99)} PASSED",
            f"commit {sha} (HEAD -> main, origin/main)",
        ]
    return "\n".join(lines)[:size]


def _config(rng: random.Random, size: int) -> str:
    # Worst case for the pre-filter: every line names a credential (none holds one), and no
    # line repeats (nothing for the memo of clean lines).
    words = ("password", "secret", "token", "api_key", "auth")
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < size:
        word = rng.choice(words)
        name = "".join(rng.choice(string.ascii_lowercase) for _ in range(8))
        lines.append(f"{word}_file = /etc/app/{word}.d/{name}.conf  # line {len(lines)}")
    return "\n".join(lines)[:size]


def corpora(kib: int, trajectories: Sequence[Path] = ()) -> dict[str, list[str]]:
    """Texts of about 4 KiB each, *kib* KiB per kind: code, logs, credential-word config,
    and the observations of real agent runs when *trajectories* are given."""
    rng = random.Random(1204)
    count = max(1, kib // 4)
    out = {
        "code": [_code(rng, 4096) for _ in range(count)],
        "logs": [_log(rng, 4096) for _ in range(count)],
        "credential-word config": [_config(rng, 4096) for _ in range(count)],
    }
    observed: list[str] = []
    for path in trajectories:
        observed += [s.observation for s in load_trajectory(path).steps if s.observation.strip()]
    if observed:
        out["agent observations"] = observed
    return out


def _ms_per_kib(
    fn: Callable[[SecretScanner, str], object], texts: Sequence[str], repeat: int, *, warm: bool
) -> float:
    """Best of *repeat* passes over *texts*; each pass with a new scanner (cold: its memo of
    clean lines empty) or, *warm*, with one that has seen the texts once."""
    kib = sum(len(t.encode("utf-8")) for t in texts) / 1024
    best = float("inf")
    for _ in range(repeat):
        scanner = SecretScanner()
        if warm:
            for text in texts:
                fn(scanner, text)
        start = time.perf_counter()
        for text in texts:
            fn(scanner, text)
        best = min(best, time.perf_counter() - start)
    return round(best * 1000 / kib, 3)


def _findings(scanner: SecretScanner, text: str) -> object:
    return scanner.findings(text)


def _first(scanner: SecretScanner, text: str) -> object:
    return scanner.first_finding(text[: scanner.max_chars])


def _record_ms(policy: str, texts: Sequence[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        with open_engine("memory://") as engine:
            engine.register_agent(
                AgentIdentity(agent_id="a", role="worker", budget=8000),
                AgentSettings(secrets=policy),  # type: ignore[arg-type]
            )
            engine.scanner.findings("warm up")
            start = time.perf_counter()
            for n, text in enumerate(texts):
                engine.record("a", f"{n}\n{text}", source=Source.TOOL_LOG)
            best = min(best, time.perf_counter() - start)
    return round(best * 1000 / len(texts), 3)


def run_secret_scan_cost(
    kib: int, *, repeat: int = 3, trajectories: Sequence[Path] = ()
) -> dict[str, Any]:
    """Per kind of text: ms/KiB of ``findings`` (the record-time scan) with a new scanner and
    with one that has seen the texts (its memo of clean lines), and of the intake's
    ``first_finding`` (detect-secrets on every line); per 4 KiB record in a new engine: ms
    with the default ``redact`` policy and with ``allow`` (no scan)."""
    start = time.perf_counter()
    scanner = SecretScanner()
    built = round((time.perf_counter() - start) * 1000, 1)
    rows = []
    for name, texts in corpora(kib, trajectories).items():
        flagged = sum(1 for t in texts if scanner.findings(t))
        rows.append(
            {
                "text": name,
                "texts": len(texts),
                "kib": round(sum(len(t.encode("utf-8")) for t in texts) / 1024, 1),
                "flagged": flagged,
                "scan_ms_per_kib": _ms_per_kib(_findings, texts, repeat, warm=False),
                "warm_ms_per_kib": _ms_per_kib(_findings, texts, repeat, warm=True),
                "unfiltered_ms_per_kib": _ms_per_kib(_first, texts, repeat, warm=False),
            }
        )
    texts = corpora(kib)["code"]
    return {
        "scanner_build_ms": built,
        "rows": rows,
        "record_items": len(texts),
        "record_redact_ms": _record_ms("redact", texts, repeat),
        "record_allow_ms": _record_ms("allow", texts, repeat),
    }
