"""How late can a public sandbox call return, on hostile sources? The worst case per call.

    python bench/bench_deadlines.py

Each public call (constructor, reset, step, hint, validate_env, close) runs against the hostile
sources below, which hang, hide from signals, flood or forge the reply pipe, stop reading
requests, or are merely slow in every call. For each call it prints the worst wall time, its
deadline, and the worst overrun (time past the deadline); the guarantee is an overrun under a
second. The hostile environments reach the real os/ctypes through the test suite's escape kit.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests")]
from hostile import KIT, env_source  # noqa: E402  (the escape kit the hostile tests use)

from spade_mini.sandbox import SandboxedEnv, SandboxError, SandboxLimits, validate_env  # noqa: E402
from spade_mini.sandbox.process import KILL_WAIT_S  # noqa: E402

LIMITS = SandboxLimits(call_timeout_s=2.0, load_timeout_s=3.0, max_action_chars=4 * 2**20)
BUDGET_S = 5.0
HANG = "while True:\n    pass"
SIGTERM_PROOF = 'S = worker()["__builtins__"].__import__("_signal")\nS.signal(15, S.SIG_IGN)\n'
OK_LINE = '\'{"id": %d, "ok": true, "value": ["o", 0.0, false, false, {}], "notes": []}\\n\''
CALL_SOURCES = {  # the body of reset/step/hint (each also runs at load where it makes sense)
    "hang": HANG,
    "sigterm_proof_hang": SIGTERM_PROOF + HANG,
    "c_level_loop": "sum(range(10**12))",
    "recursion_limit_1e7": 'worker()["sys"].setrecursionlimit(10**7)\n'
                           "def f(n):\n    return f(n + 1)\nf(0)",
    "flood_without_newline": 'reply("x" * (64 * 2**20))',
    "deep_forgery_then_hang": f'reply({OK_LINE[:-4]}\' % request_id() + "[" * 400000 + "\\n")\n{HANG}',
    "forge_then_stop_reading": f"reply({OK_LINE} % request_id())\n{HANG}",
    "spin_just_under_timeout": f"spin({LIMITS.call_timeout_s - 0.1})\nreturn 'o', 0.0, False, False, {{}}",
}


def timed(fn) -> float:
    start = time.monotonic()
    try:
        fn()
    except SandboxError:  # the expected outcome; anything else is a bug and propagates
        pass
    return time.monotonic() - start


def source(body: str, where: str) -> str:
    ok = 'return "o", 0.0, False, False, {}'
    reset = body.replace("return 'o', 0.0, False, False, {}", 'return "o", {}') \
        if where == "reset" else 'return "start", {}'
    step = body if where == "step" else ok
    hint = f"    def hint(self):\n{''.join('        ' + ln + chr(10) for ln in body.splitlines())}" \
        if where == "hint" else ""
    return env_source(step, reset=reset) + hint


def main() -> None:
    worst: dict[str, tuple[float, float, str]] = {}

    def record(call: str, elapsed: float, deadline: float, case: str) -> None:
        if call not in worst or elapsed - deadline > worst[call][0] - worst[call][1]:
            worst[call] = (elapsed, deadline, case)

    for case, body in CALL_SOURCES.items():
        load = env_source('return "o", 0.0, False, False, {}', top=body.replace("return", "x ="))
        record("SandboxedEnv()", timed(lambda: SandboxedEnv(load, limits=LIMITS)),
               LIMITS.load_timeout_s, case)
        for where in ("reset", "step", "hint"):
            env = SandboxedEnv(source(body, where), limits=LIMITS)
            if where != "reset":
                env.reset(seed=0)
            call = {"reset": lambda: env.reset(seed=0), "step": lambda: env.step("x" * 2**20),
                    "hint": env.hint}[where]
            record(f"{where}()", timed(call), LIMITS.call_timeout_s, case)
            if where == "reset":  # the child was killed: this reset starts a fresh one
                record("reset() restart", timed(call),
                       LIMITS.load_timeout_s + LIMITS.call_timeout_s, case)
            record("close()", timed(env.close), KILL_WAIT_S, f"after {where}: {case}")
        record("validate_env()", timed(lambda: validate_env(source(body, "step"), limits=LIMITS,
                                                            time_budget_s=BUDGET_S)),
               BUDGET_S, case)
        running = SandboxedEnv(KIT + source("spin_thread()\n" + 'return "o", 0.0, False, False, {}',
                                            "step"), limits=LIMITS)
        running.reset(seed=0)
        running.step("x")
        record("close()", timed(running.close), KILL_WAIT_S, "a thread left spinning")
    print(f"limits: call {LIMITS.call_timeout_s} s, load {LIMITS.load_timeout_s} s, "
          f"validate budget {BUDGET_S} s, close {KILL_WAIT_S} s; {len(CALL_SOURCES)} hostile sources")
    print(f"{'call':16} {'worst s':>8} {'deadline s':>10} {'overrun s':>9}  worst source")
    for call, (elapsed, deadline, case) in worst.items():
        print(f"{call:16} {elapsed:8.2f} {deadline:10.2f} {elapsed - deadline:+9.2f}  {case}")


if __name__ == "__main__":
    main()
