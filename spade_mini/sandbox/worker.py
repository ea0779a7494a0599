"""Child side of the sandbox: harden this process, load one environment, serve it over pipes.

Started by `process.Child` as `python -s -S -P worker.py CONFIG_JSON` with an explicit, minimal
environment (PYTHONHASHSEED=0, so string hashing and set order are the same in every child).
Before any environment code runs, `kernel.harden` applies exactly the layers the parent asked
for (or, with "probe", every layer it can, and reports them). The first request carries the
source; after that, requests {"id", "op", ...} arrive on the request fd and replies {"id", "ok",
"value", "notes"} or {"id", "ok": false, "kind", "message", "traceback"} go to the reply fd.
stdout/stderr are /dev/null, so nothing the environment prints reaches the parent. The worker
exits when the request pipe closes (the parent is gone) and re-checks its parent before each
request. Before `reset(seed=s)` the global `random` is seeded with s, so an environment that
uses it is still the same episode for the same seed. An environment with levels (a class
attribute `levels`, 1 to MAX_LEVELS; none: one level) is reset as `reset(seed=s, options={"level":
n})`, a one-level one as `reset(seed=s)`. The ops `solution`, `draws` and a reset's `perturb` are
asked for only by the parent's solution.py (validation and the leak check), never by the play API.

The import allowlist below only gives early, readable errors; it is NOT a security boundary
(frames, `__subclasses__` and module attributes reach everything). The kernel layers are.
"""
import json
import math
import os
import random
import sys
import traceback

ALLOWED_IMPORTS = frozenset({
    "__future__", "abc", "array", "bisect", "cmath", "collections", "copy", "dataclasses", "datetime",
    "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq", "itertools", "json",
    "math", "numbers", "operator", "pprint", "random", "re", "statistics", "string",
    "textwrap", "typing", "unicodedata", "tooluse",
})
MAX_LEVELS = 8  # difficulty levels an environment may have (0 is the easiest)
# What the parent finds the source importing is imported before hardening (afterwards, e.g. with
# a uid of its own, the child may not be able to read a stdlib under /root).
ENV_MODULE = "sandboxed_env"
HERE = os.path.dirname(os.path.abspath(__file__))
draws = None  # draws.py, the reset's random draws counted and changed: imported in main() beside kernel


class ProtocolViolation(Exception):
    """The environment returned something outside the contract (wrong shape or type)."""


class ForbiddenImport(ImportError):
    """An import outside the allowlist (reported as a structure error, not a load error)."""


class StructureError(Exception):
    """Not exactly one class whose name ends in 'Env'."""


def json_safe(x, limit: int, depth: int = 0):
    if x is None or type(x) is bool:
        return x
    if type(x) is int:  # huge ints would hit int->str limits while serialising
        return x if -2**63 <= x < 2**63 else "<int too large>"
    if type(x) is float:
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, str):
        return str.__str__(x)[:limit]
    if depth > 20:
        return "<too deep>"
    if type(x) in (list, tuple):
        return [json_safe(v, limit, depth + 1) for v in list(x)[:1000]]
    if type(x) is dict:
        items = list(dict.items(x))[:1000]
        return {(k if type(k) is str else repr(k))[:200]: json_safe(v, limit, depth + 1)
                for k, v in items}
    return repr(x)[:200]


def check_reward(r, notes: list[str]) -> float:
    if type(r) is bool:
        notes.append("reward was a bool")
        return float(r)
    if type(r) not in (int, float):
        raise ProtocolViolation(f"reward must be a float, got {type(r).__name__}")
    try:
        value = float(r)
    except OverflowError:
        raise ProtocolViolation("reward is too large for a float") from None
    if not math.isfinite(value):
        raise ProtocolViolation(f"reward must be finite, got {value!r}")
    return value


def check_obs(obs, limit: int, what: str = "observation") -> str:
    if not isinstance(obs, str):
        raise ProtocolViolation(f"{what} must be a str, got {type(obs).__name__}")
    return str.__str__(obs)[:limit]


def check_actions(actions, max_actions: int, limit: int) -> list[str]:
    """solution()'s return value, checked: a list (or tuple) of 1 to `max_actions` strings of at
    most `limit` characters each."""
    if type(actions) not in (list, tuple):
        raise ProtocolViolation("solution() must return a list of str, got "
                                + type(actions).__name__)
    if not 1 <= len(actions) <= max_actions:
        raise ProtocolViolation(f"solution() returned {len(actions)} actions; return 1 to "
                                f"{max_actions}")
    checked = []
    for i, action in enumerate(actions):
        if not isinstance(action, str):
            raise ProtocolViolation(f"solution() action {i} must be a str, got "
                                    + type(action).__name__)
        checked.append(str.__str__(action))
        if len(checked[-1]) > limit:
            raise ProtocolViolation(f"solution() action {i} has {len(checked[-1])} characters, "
                                    f"more than {limit}")
    return checked


def run_op(env, req: dict, cfg: dict, notes: list[str]):
    limit = cfg["max_obs_chars"]
    if req["op"] == "reset":
        if req["seed"] is not None:
            random.seed(req["seed"])  # the global generator too: same seed, same episode
        level = req.get("level", 0)
        levels = env_levels(env)
        if type(level) is not int or not 0 <= level < levels:
            raise ProtocolViolation(f"level {level!r} asked, but the environment has levels 0 to {levels - 1}")
        perturb = req.get("perturb")  # validation's question: solution.py
        draws.Draws.count, draws.Draws.perturb = 0, None if perturb is None else (int(perturb[0]), bool(perturb[1]))
        try:
            out = (env.reset(seed=req["seed"], options={"level": level}) if levels > 1
                   else env.reset(seed=req["seed"]))
        finally:
            draws.Draws.perturb = None
        if type(out) is not tuple or len(out) != 2:
            raise ProtocolViolation("reset must return a tuple (observation, info)")
        if type(out[1]) is not dict:
            raise ProtocolViolation(f"reset info must be a dict, got {type(out[1]).__name__}")
        return [check_obs(out[0], limit), json_safe(out[1], limit)]
    if req["op"] == "step":
        out = env.step(req["action"])
        if type(out) is not tuple or len(out) != 5:
            raise ProtocolViolation(
                "step must return a 5-tuple (observation, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, info = out
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if type(flag) is not bool:
                raise ProtocolViolation(f"{name} must be a bool, got {type(flag).__name__}")
        if type(info) is not dict:
            raise ProtocolViolation(f"step info must be a dict, got {type(info).__name__}")
        return [check_obs(obs, limit), check_reward(reward, notes), terminated, truncated,
                json_safe(info, limit)]
    if req["op"] == "hint":
        return check_obs(env.hint(), cfg["max_hint_chars"], "hint")
    if req["op"] == "solution":
        return check_actions(env.solution(), req["max_actions"], cfg["max_action_chars"])
    if req["op"] == "draws":  # the random draws of the last reset
        return draws.Draws.count
    raise ProtocolViolation(f"unknown op {req['op']!r}")


def env_levels(env) -> int:
    """How many difficulty levels the environment says it has (a class attribute `levels`)."""
    levels = getattr(type(env), "levels", 1)
    if type(levels) is not int or not 1 <= levels <= MAX_LEVELS:
        raise StructureError(f"levels must be an int from 1 to {MAX_LEVELS}, got {levels!r}")
    return levels


def load_env(source: str):
    import builtins
    import linecache
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.partition(".")[0] not in ALLOWED_IMPORTS:
            raise ForbiddenImport(f"import of {name!r} is not allowed in the sandbox "
                                  f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
        return real_import(name, globals, locals, fromlist, level)

    draws.count_draws()
    linecache.cache["<env>"] = (len(source), None, source.splitlines(True), "<env>")
    env_builtins = dict(builtins.__dict__, __import__=guarded_import)
    namespace = {"__name__": ENV_MODULE, "__builtins__": env_builtins}
    exec(compile(source, "<env>", "exec"), namespace)
    classes = [v for k, v in namespace.items() if isinstance(v, type) and k.endswith("Env")
               and v.__module__ == ENV_MODULE]
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise StructureError(f"expected exactly one class whose name ends in 'Env', "
                              f"found {len(classes)} ({names})")
    return classes[0]()


def send(fd: int, msg: dict, cap: int) -> None:
    try:
        data = json.dumps(msg, allow_nan=False).encode()
        problem = f"reply of {len(data)} bytes exceeds the {cap}-byte cap" * (len(data) > cap)
    except (ValueError, TypeError) as exc:
        problem = f"reply is not serialisable: {exc}"
    if problem:
        data = json.dumps({"id": msg["id"], "ok": False, "kind": "protocol", "traceback": "",
                           "message": problem}).encode()
    view = memoryview(data + b"\n")
    while view:
        view = view[os.write(fd, view):]


def error_reply(req_id: int, kind: str, exc: BaseException) -> dict:
    try:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        tb = "" if kind == "protocol" else traceback.format_exc(limit=20)[-8000:]
    except Exception:  # an exception whose __str__ itself raises
        message, tb = type(exc).__name__, ""
    return {"id": req_id, "ok": False, "kind": kind, "message": message, "traceback": tb}


def serve(env, requests, reply_fd: int, cfg: dict) -> None:
    parent = os.getppid()
    for line in requests:  # ends when the parent closes the pipe, or dies
        if os.getppid() != parent:
            os._exit(3)
        req = json.loads(line)
        notes: list[str] = []
        try:
            msg = {"id": req["id"], "ok": True, "value": run_op(env, req, cfg, notes),
                   "notes": notes}
        except ProtocolViolation as exc:
            msg = error_reply(req["id"], "protocol", exc)
        except BaseException as exc:  # SystemExit, MemoryError, RecursionError: all the env's
            msg = error_reply(req["id"], "runtime", exc)
        send(reply_fd, msg, cfg["max_reply_bytes"])


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if sys.path and sys.path[0] == HERE:  # Python 3.10 has no -P
        del sys.path[0]
    for name in cfg["preload"]:
        try:
            __import__(name)
        except ImportError:  # `from a import b` with b not a module: "a" is in the list too
            pass
    if "tooluse" in cfg["preload"]:
        import importlib.util
        spec = importlib.util.spec_from_file_location("tooluse", cfg["tooluse_path"])
        tooluse = importlib.util.module_from_spec(spec)
        sys.modules["tooluse"] = tooluse  # for the environment's `from tooluse import ToolUseEnv`
        spec.loader.exec_module(tooluse)
    sys.path.insert(0, HERE)
    global draws
    import draws  # noqa: E402  (child-side modules next to this file, not the package)
    import kernel  # noqa: E402
    del sys.path[0]
    reply_fd, cap = cfg["reply_fd"], cfg["max_reply_bytes"]
    try:
        layers = kernel.harden(cfg)  # with a pid namespace, only the inner process returns
    except kernel.LayerError as exc:
        send(reply_fd, {"id": 0, "ok": False, "kind": "start", "message": str(exc)[:2000],
                        "traceback": ""}, cap)
        return
    if cfg["probe"]:
        send(reply_fd, {"id": 0, "ok": True, "value": layers, "notes": []}, cap)
        return
    requests = os.fdopen(cfg["request_fd"], "rb")
    try:
        first = json.loads(requests.readline())
        env = load_env(first["source"])
        value = {"class_name": type(env).__name__, "has_hint": callable(getattr(env, "hint", None)),
                 "has_solution": callable(getattr(env, "solution", None)), "levels": env_levels(env)}
        send(reply_fd, {"id": 0, "ok": True, "value": value, "notes": []}, cap)
    except BaseException as exc:  # anything the environment source does is reported, not fatal
        kind = "structure" if isinstance(exc, (ForbiddenImport, StructureError)) else "load"
        send(reply_fd, error_reply(0, kind, exc), cap)
        return
    serve(env, requests, reply_fd, cfg)


if __name__ == "__main__":
    main()
    os._exit(0)  # no interpreter shutdown: a thread the environment left must not keep us alive
