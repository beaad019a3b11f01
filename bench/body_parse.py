"""What reading a request body costs, per bundled Nova body: Cortex's read and the others.

Run: .venv/bin/python bench/body_parse.py [--repeat 300]

For each body of tests/fixtures/nova, the median microseconds of, taken in turn call by
call so that the machine's other work weighs on all alike:

- ``orjson``: ``orjson.loads`` alone, the floor (it keeps the last of repeated keys);
- ``cortex``: :func:`cortex.api.body.parse_exactly`, the request path: orjson's parse,
  the checks that say it read what the standard library reads (no repeated key, no
  integer past 64 bits), and, when a check is unsure, the standard library's parse
  with the duplicate-key hook;
- ``dup check``: the repeated-key check of ``cortex`` alone (its share);
- ``stdlib``: :func:`json.loads` with the duplicate-key hook, the one-pass parse that
  refuses a repeated key as it reads it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cortex.api.body import _unique_keys, parse_exactly  # noqa: E402
from cortex.jsontext import count_colons  # noqa: E402


def ways_of(data: bytes) -> dict:
    """Each way to read ``data``, a call without arguments."""
    document = orjson.loads(data)
    return {"orjson": lambda: orjson.loads(data),
            "cortex": lambda: parse_exactly(data),
            "dup check": lambda: count_colons(orjson.dumps(document)) == count_colons(data),
            "stdlib": lambda: json.loads(data, object_pairs_hook=_unique_keys)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    names = ("orjson", "cortex", "dup check", "stdlib")
    print(f"{'body':42} {'bytes':>7} " + " ".join(f"{name:>10}" for name in names)
          + "   (median us)")
    for path in sorted((REPO / "tests/fixtures/nova").glob("*.json")):
        data = path.read_bytes()
        ways = ways_of(data)
        taken: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.repeat):
            for name in names:
                started = time.perf_counter()
                ways[name]()
                taken[name].append(time.perf_counter() - started)
        print(f"{path.name:42} {len(data):7d} " + " ".join(
            f"{statistics.median(taken[name]) * 1e6:10.1f}" for name in names))


if __name__ == "__main__":
    main()
