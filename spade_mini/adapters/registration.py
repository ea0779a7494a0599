"""gymnasium ids for spade_mini's environments: the bundled ones, and suites exported from runs.

Importing `spade_mini` calls `register_bundled()`, which registers every bundled environment,
each built sandboxed (a `SandboxedEnv`; gymnasium starts its child in `gym.make`, never here):

    spade_mini/<Name>-v0           the EXAMPLES (the environments training may show and play)
    spade_mini_heldout/<Name>-v0   the HELDOUT ones, in a namespace of their own, so that a list
                                   of `spade_mini/` ids never holds one that eval keeps unseen

`<Name>` is the file name in CamelCase (guess_number.py -> GuessNumber). `register_suite(folder)`
registers a folder written by `python -m spade_mini.adapters.export` (manifest.json and one source file
per environment) as `<namespace>/<name>-v0`, the namespace `spade_mini_suite_<run>` unless one
is given. A suite may come from anyone: its manifest is checked, its files must lie in the
folder, and its sources run only in the sandbox.

`max_episode_steps` is `turn_cap(source)`: the environment's own cap when its source sets one
(a `max_turns` in its class, a module-level `MAX_TURNS`, or ToolUseEnv's default for a tool-use
environment), never more than the contract's `envs.MAX_TURNS` that every episode of training
is played under, and that when it sets none.
Omitted: vector entry points. `gym.make_vec(id, n)` works on these ids; in "async" mode it needs
`vector_kwargs={"shared_memory": False}` (gymnasium's shared-memory copy of a Text observation
came back as padding only, here as with the ASCII charset before).
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import gymnasium

from spade_mini.envs import EXAMPLES, HELDOUT, MAX_TURNS, HandEnv
from spade_mini.sandbox import SandboxedEnv, SourceError, parse_source
from spade_mini.tooluse import ToolUseEnv

NAMESPACE, HELDOUT_NAMESPACE = "spade_mini", "spade_mini_heldout"
MANIFEST = "manifest.json"
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")  # what gymnasium accepts in a name or namespace


def camel(file_name: str) -> str:
    return "".join(part.title() for part in file_name.split("_"))


def _int_assigned(body: list, name: str) -> int | None:
    for node in body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                 for t in node.targets)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            return node.value.value
    return None


def parsed(source: str) -> ast.Module | None:
    """The bounded parse of untrusted `source`, or None (such a source never validated)."""
    try:
        return parse_source(source)
    except SourceError:
        return None


def env_class(tree: ast.Module | None) -> ast.ClassDef | None:
    """The top-level *Env class of a parsed source (ToolUseEnv itself is not one)."""
    return next((n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef)
                 and n.name.endswith("Env") and n.name != "ToolUseEnv"), None)


def is_tool_use(cls: ast.ClassDef | None) -> bool:
    return cls is not None and any(isinstance(b, ast.Name) and b.id == "ToolUseEnv" for b in cls.bases)


def turn_cap(source: str) -> int:
    """The most turns an episode of `source` may take (see the module docstring)."""
    tree = parsed(source)
    cls = env_class(tree)
    own = _int_assigned(cls.body, "max_turns") if cls else None
    if own is None and tree is not None:
        own = _int_assigned(tree.body, "MAX_TURNS")
    if own is None and is_tool_use(cls):
        own = ToolUseEnv.max_turns
    return min(own, MAX_TURNS) if own is not None and own >= 1 else MAX_TURNS


# ---- entry points (gymnasium calls these in gym.make) ----

def make_bundled(name: str, **sandbox) -> SandboxedEnv:
    """The bundled environment `name` (a file name of spade_mini/envs/), sandboxed."""
    env = {e.name: e for e in EXAMPLES + HELDOUT}[name]
    return SandboxedEnv(env.source, **sandbox)


def make_from_file(path: str, **sandbox) -> SandboxedEnv:
    """The environment whose source is the file `path`, sandboxed."""
    return SandboxedEnv(Path(path).read_text(encoding="utf-8"), **sandbox)


# ---- registration ----

def bundled_id(env: HandEnv) -> str:
    namespace = HELDOUT_NAMESPACE if env in HELDOUT else NAMESPACE
    return f"{namespace}/{camel(env.name)}-v0"


def register_bundled() -> list[str]:
    """Register every bundled environment (EXAMPLES and HELDOUT); return their ids."""
    ids = []
    for env in EXAMPLES + HELDOUT:
        ids.append(bundled_id(env))
        gymnasium.register(ids[-1], entry_point="spade_mini.adapters.registration:make_bundled",
                           kwargs={"name": env.name}, max_episode_steps=turn_cap(env.source))
    return ids


def read_suite(folder: str | Path) -> tuple[dict, list[dict]]:
    """(manifest, its environments, each with `path` added) of an exported suite folder."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; pass a folder written by "
                                "`python -m spade_mini.adapters.export RUN_DIR --out FOLDER`.")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); export the run again.") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("environments"), list):
        raise ValueError(f"{path} has no list of environments; export the run again.")
    envs = []
    for entry in manifest["environments"]:
        ok = isinstance(entry, dict) and all(
            isinstance(entry.get(k), str) and NAME_RE.fullmatch(entry[k]) for k in ("name", "file"))
        if not ok or not entry["file"].endswith(".py") or not (folder / entry["file"]).is_file():
            raise ValueError(f"{path} lists an environment without a valid name and a source "
                             f"file in the folder ({str(entry)[:80]}); export the run again.")
        if entry.get("setting", "games") not in ("games", "tool_use"):
            raise ValueError(f"{path}: {entry['name']} has setting {str(entry['setting'])[:40]!r}, "
                             "not 'games' or 'tool_use'; export the run again.")
        envs.append({**entry, "path": str((folder / entry["file"]).resolve())})
    return manifest, envs


def suite_namespace(manifest: dict) -> str:
    run = manifest.get("run")
    safe = re.sub(r"[^A-Za-z0-9_]", "_", run) if isinstance(run, str) and run else "run"
    return f"spade_mini_suite_{safe}"


def register_suite(folder: str | Path, namespace: str | None = None) -> list[str]:
    """Register every environment of an exported suite as `<namespace>/<name>-v0`; return the ids."""
    manifest, envs = read_suite(folder)
    namespace = namespace or suite_namespace(manifest)
    if not NAME_RE.fullmatch(namespace):
        raise ValueError(f"namespace {namespace!r} may hold only letters, digits, '_', '.' and '-'.")
    ids = []
    for env in envs:
        ids.append(f"{namespace}/{env['name']}-v0")
        source = Path(env["path"]).read_text(encoding="utf-8")
        gymnasium.register(ids[-1], entry_point="spade_mini.adapters.registration:make_from_file",
                           kwargs={"path": env["path"]}, max_episode_steps=turn_cap(source))
    return ids


def suite_envs(folder: str | Path) -> list[HandEnv]:
    """The environments of an exported suite as HandEnv records (what eval plays)."""
    _, envs = read_suite(folder)
    return [HandEnv(e["name"], e.get("setting", "games"), e.get("skill", ""),
                    f"iteration {e.get('iteration')}, regret {e.get('regret')}",
                    Path(e["path"]).read_text(encoding="utf-8")) for e in envs]
