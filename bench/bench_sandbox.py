"""What the sandbox costs: child start-up, step round trip, and many live children at once.

    python bench/bench_sandbox.py                 # start-up and step round trip
    python bench/bench_sandbox.py --children 384  # also: memory and start-up of 384 live children

The step round trip is printed as a ratio to an in-process call (the bench execs its own trusted
environment for that; generated environments are never run that way). With `--children N` it
starts N children one after the other and then N at once with `start_envs` (where it exists),
and prints the ratio of the two wall times, the sum of the children's RSS and PSS (every process
of every sandbox, found by its tag), the memory the machine lost (MemAvailable), and the
descriptors the parent holds.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
import spade_mini.sandbox as sandbox  # noqa: E402
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


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) / 1024


def sandbox_memory_mb(tags: set[str]) -> tuple[int, float, float]:
    """(processes, summed RSS, summed PSS) of every process whose environment holds a tag."""
    count, rss, pss = 0, 0.0, 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            tag = next((t for t in tags if t.encode() in environ), None)
            if tag is None:
                continue
            with open(f"/proc/{pid}/smaps_rollup") as f:
                fields = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ln.endswith("kB\n")}
        except (OSError, StopIteration):
            continue
        count, rss, pss = count + 1, rss + fields["Rss"] / 1024, pss + fields["Pss"] / 1024
    return count, rss, pss


def many_children(n: int) -> None:
    t0 = time.perf_counter()
    serial = [SandboxedEnv(BENCH_ENV) for _ in range(n)]
    serial_s = time.perf_counter() - t0
    for env in serial:
        env.close()
    start_envs = getattr(sandbox, "start_envs", None)
    before_mb = mem_available_mb()
    t0 = time.perf_counter()
    envs = start_envs([BENCH_ENV] * n) if start_envs else [SandboxedEnv(BENCH_ENV) for _ in range(n)]
    parallel_s = time.perf_counter() - t0
    failed = [e for e in envs if not isinstance(e, SandboxedEnv)]
    envs = [e for e in envs if isinstance(e, SandboxedEnv)]
    t0 = time.perf_counter()
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.step("\\boxed{1}")
    play_s = time.perf_counter() - t0
    procs, rss, pss = sandbox_memory_mb({env.tag for env in envs})
    lost_mb = before_mb - mem_available_mb()
    fds = len(os.listdir("/proc/self/fd"))
    t0 = time.perf_counter()
    for env in envs:
        env.close()
    close_s = time.perf_counter() - t0
    print(f"{n} children: {len(failed)} failed to start"
          + (f" (first: {type(failed[0]).__name__}: {failed[0]})" if failed else ""))
    print(f"  start one after the other: {serial_s:.2f} s ({serial_s / n * 1e3:.1f} ms each)")
    print(f"  start with {'start_envs' if start_envs else 'a loop (no start_envs)'}: "
          f"{parallel_s:.2f} s; serial / this = {serial_s / parallel_s:.2f}x")
    print(f"  one reset + step each: {play_s:.2f} s; close all: {close_s:.2f} s")
    print(f"  memory: {procs} processes, RSS {rss:.0f} MB ({rss / n:.1f} per child), "
          f"PSS {pss:.0f} MB ({pss / n:.1f} per child); MemAvailable fell {lost_mb:.0f} MB")
    print(f"  descriptors open in the parent: {fds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=0, help="also measure N live children")
    args = parser.parse_args()
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
    if args.children:
        many_children(args.children)


if __name__ == "__main__":
    main()
