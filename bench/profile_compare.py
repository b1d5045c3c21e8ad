"""Where a Treadle worker's CPU per step goes against the floor's, by kind of code.

    python -m bench.cpu --steps 20 --reps 3 --profile-worker T.prof --profile-floor F.prof
    python -m bench.profile_compare T.prof F.prof --steps 20 --reps 3 [--top 25]

Both profiles are ``bench.profiled``'s: cProfile in every thread, each thread's own CPU time.
Every function's own time (``tottime``) is put in one bucket by where its code lives (the SDK's
sandbox, its activity worker, payload conversion, the HTTP client, Treadle's activities by
package, the event loop, system calls...) and divided by the model calls each worker made:
Treadle's worker runs two configurations a round (whole replies, then the defaults), the floor
one. Printed per bucket: ms a step on each side and the difference, largest first; then the
functions that add the most. cProfile's own cost inflates code that makes many small calls, so
read the ranking and the shares, not the absolute figures. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import pstats
from collections import Counter

WAITS = ("<method 'get' of '_queue.SimpleQueue' objects>", "<method 'acquire' of '_thread.")
"""Blocking waits: a thread waiting counts no CPU, but cProfile's hooks around them do not
always agree; left out of both sides."""

BUCKETS: tuple[tuple[str, str], ...] = (
    ("temporalio/worker/workflow_sandbox", "SDK: workflow sandbox"),
    ("temporalio/worker/_workflow", "SDK: workflow worker and instance"),
    ("temporalio/worker/_activity", "SDK: activity worker"),
    ("temporalio/contrib/workflow_streams", "SDK: workflow streams"),
    ("temporalio/contrib/pydantic", "SDK: payload conversion"),
    ("temporalio/converter", "SDK: payload conversion"),
    ("temporalio/bridge", "SDK: core bridge (visitors, protobuf)"),
    ("temporalio/", "SDK: other"),
    ("google/protobuf", "protobuf"),
    ("pydantic", "pydantic"),
    ("opentelemetry", "OpenTelemetry"),
    ("httpx", "HTTP client"),
    ("httpcore", "HTTP client"),
    ("h11", "HTTP client"),
    ("anyio", "HTTP client"),
    ("/activities/", "Treadle activities"),
    ("/workflows/", "Treadle workflows"),
    ("/treadle/", "Treadle shared"),
    ("/bench/", "floor's own code"),
    ("asyncio/", "event loop and threads"),
    ("selectors.py", "event loop and threads"),
    ("concurrent/", "event loop and threads"),
    ("threading.py", "event loop and threads"),
    ("json/", "json"),
    ("logging/", "logging"),
)


def bucket(key: tuple[str, int, str]) -> str:
    """The bucket of one profiled function: by its file, built-ins by what they call."""
    path, _, name = key
    if path == "~":
        if "posix." in name or "io.open" in name or "_io." in name:
            return "system calls: files"
        if "_socket" in name or "select.epoll" in name or "_ssl" in name:
            return "system calls: sockets and epoll"
        if "_hashlib" in name or "zlib" in name:
            return "hashing and compression"
        return "other built-ins"
    for marker, label in BUCKETS:
        if marker in path:
            if label == "Treadle activities":
                package = path.split("/activities/", 1)[1].split("/", 1)[0].removesuffix(".py")
                return f"Treadle activities: {package}"
            return label
    return "other standard library"


def per_step(path: str, calls: int) -> tuple[Counter[str], Counter[str]]:
    """ms a step by bucket, and by function, of one profile."""
    buckets: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    for key, (_, _, tottime, _, _) in pstats.Stats(path).stats.items():  # type: ignore[attr-defined]
        name = key[2]
        if any(name.startswith(wait) for wait in WAITS):
            continue
        ms = tottime / calls * 1000
        buckets[bucket(key)] += ms
        short = key[0].rsplit("site-packages/", 1)[-1].rsplit("/main/", 1)[-1]
        functions[f"{short}:{key[1]} {name}"] += ms
    return buckets, functions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("treadle", help="bench.cpu --profile-worker's file")
    parser.add_argument("floor", help="bench.cpu --profile-floor's file")
    parser.add_argument("--steps", type=int, required=True, help="bench.cpu's --steps")
    parser.add_argument("--reps", type=int, required=True, help="bench.cpu's --reps")
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    args = parser.parse_args()
    calls = args.reps * (args.steps + 1)
    treadle, treadle_functions = per_step(args.treadle, 2 * calls)
    floor, floor_functions = per_step(args.floor, calls)
    print(f"ms a step under cProfile, by bucket (Treadle {2 * calls} calls, floor {calls})")
    print(f"{'':44}{'treadle':>9}{'floor':>9}{'extra':>9}")
    rows = sorted(set(treadle) | set(floor), key=lambda b: floor[b] - treadle[b])
    for name in rows:
        extra = treadle[name] - floor[name]
        print(f"{name:44}{treadle[name]:>9.3f}{floor[name]:>9.3f}{extra:>+9.3f}")
    total_t, total_f = sum(treadle.values()), sum(floor.values())
    print(f"{'all':44}{total_t:>9.3f}{total_f:>9.3f}{total_t - total_f:>+9.3f}")
    print(f"\nthe {args.top} functions adding the most (ms a step)")
    added = {f: treadle_functions[f] - floor_functions[f] for f in treadle_functions}
    for function, extra in sorted(added.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{extra:>+8.3f}  {function}")


if __name__ == "__main__":
    main()
