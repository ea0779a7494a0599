"""What the sandbox costs: child start-up, step round trip, and the ratio to an in-process call.

Run: python bench/bench_sandbox.py. The in-process baseline execs the bench's own trusted
environment below; generated environments are never run that way.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from spade_mini.sandbox import SandboxedEnv  # noqa: E402

STARTS = 20
STEPS = 2000
BENCH_ENV = '''
import random
class CounterEnv:
    def reset(self, seed=None):
        self.rng, self.turns = random.Random(seed), 0
        return "Count to ten: reply \\\\boxed{n}.", {}
    def step(self, action):
        self.turns += 1
        return "You are at %d of 10 so far; keep going." % self.turns, 0.0, False, False, {}
'''


def time_calls(step, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step("\\boxed{1}")
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    starts = []
    for _ in range(STARTS):
        t0 = time.perf_counter()
        env = SandboxedEnv(BENCH_ENV)
        starts.append(time.perf_counter() - t0)
        env.close()

    with SandboxedEnv(BENCH_ENV) as env:
        env.reset(seed=0)
        time_calls(env.step, 100)  # warm-up
        sandboxed = sorted(time_calls(env.step, STEPS))
        layers = env.layers

    namespace: dict = {}
    exec(BENCH_ENV, namespace)  # trusted bench code, not a generated environment
    local = namespace["CounterEnv"]()
    local.reset(seed=0)
    in_process = sorted(time_calls(local.step, STEPS))

    median_us = statistics.median(sandboxed) * 1e6
    p99_us = sandboxed[int(0.99 * len(sandboxed))] * 1e6
    local_us = statistics.median(in_process) * 1e6
    print(f"layers: {', '.join(layers)}")
    print(f"child start-up (load + hardening), median of {STARTS}: "
          f"{statistics.median(starts) * 1e3:.1f} ms")
    print(f"step round trip over {STEPS} steps: median {median_us:.1f} us, p99 {p99_us:.1f} us")
    print(f"in-process step: median {local_us:.2f} us; sandboxed / in-process = "
          f"{median_us / local_us:.0f}x")


if __name__ == "__main__":
    main()
