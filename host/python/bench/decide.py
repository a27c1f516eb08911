"""What a decision costs from Python: the bundled default policies in this
process, warm, one call after another (p50 and p99 over N calls).

    python host/python/bench/decide.py [N]
"""

import statistics
import sys
import tempfile
import time

import toolgate


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as scratch:
        gate = toolgate.Toolgate(store=f"{scratch}/toolgate.redb")
        call = ("Read", {"file_path": "README.md"})
        for _ in range(200):  # warm the instances
            gate.decide(*call, session="bench")
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            gate.decide(*call, session="bench")
            times.append((time.perf_counter_ns() - start) / 1000)
        times.sort()
        p50 = statistics.median(times)
        p99 = times[int(len(times) * 0.99) - 1]
        print(f"python decide (bundled default, in-process, warm): p50 {p50:.1f} µs, p99 {p99:.1f} µs over {n}")


if __name__ == "__main__":
    main()
