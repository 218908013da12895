"""Selection alone at 10k items: retrieve + each strategy's select, median ms and a digest.

``python bench/selection.py`` prints one line per strategy: the median of 15 runs in ms, the
items selected, the decisions, and the first 12 hex digits of the sha256 of the encoded
``PackResult`` — run it on two checkouts to see that a change to the packer keeps the selection
byte for byte (equal digests) and its time (the medians)."""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(ROOT))

from bench.pools import make_pool, make_request  # noqa: E402
from ctxledger.domain.retrieval import retrieve  # noqa: E402
from ctxledger.domain.strategies import get_strategy  # noqa: E402
from ctxledger.domain.tokens import EstimatingCounter  # noqa: E402

STRATEGIES = (
    "variable",
    "summary",
    "layered",
    "aggressive_refresh",
    "role_optimized",
    "full_history",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--budget", type=int, default=8_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    counter = EstimatingCounter()
    pool = make_pool(args.items)
    for name in STRATEGIES:
        request = make_request(pool, strategy=name, budget=args.budget)
        strategy = get_strategy(name)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = strategy.select(request, retrieve(request, pool), counter)
            times.append(time.perf_counter() - start)
        digest = hashlib.sha256(msgspec.json.encode(result)).hexdigest()[:12]
        median = statistics.median(times) * 1000
        print(
            f"{name:20} {median:7.2f} ms  {len(result.items):4} items  "
            f"{len(result.decisions):6} decisions  {digest}"
        )


if __name__ == "__main__":
    main()
