"""The command line and config files -> `Config` (config.py), with one-sentence errors.

`parse_args(argv)` applies, in order: a preset, a `--config file.json|yaml`, then flags; every
field of `Config` is a flag, and `--help` shows the docstring under each field. `main_config` is
the same for scripts: a bad flag or file becomes one line on stderr and exit status 2.
Omitted on purpose: sub-commands and environment-variable overrides.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import sys
import types
import typing
from pathlib import Path

from spade_mini.config import PRESETS, Config, ConfigError


def field_docs(cls=Config) -> dict[str, str]:
    """The docstring under each field, read from the class source (as cleanrl/tyro do)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = str(nxt.value.value)
    return docs


def _hints() -> dict[str, object]:
    return typing.get_type_hints(Config)


def _convert(name: str, raw, hint):
    """Turn a string (flag) or a JSON/YAML value into the field's type, or raise ConfigError."""
    origin = typing.get_origin(hint)
    try:
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            low = str(raw).strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if origin is list:
            items = raw if isinstance(raw, list) else [s for s in str(raw).split(",") if s.strip()]
            return [str(s).strip() for s in items]
        if origin in (typing.Union, types.UnionType):  # Optional[...]: 'none' means None
            if raw is None or str(raw).lower() == "none":
                return None
            inner = [a for a in typing.get_args(hint) if a is not type(None)][0]
            return _convert(name, raw, inner)
        if hint is int and isinstance(raw, float) and not raw.is_integer():
            raise ValueError
        return hint(raw)
    except (TypeError, ValueError):
        kind = "true or false" if hint is bool else getattr(hint, "__name__", str(hint))
        raise ConfigError(f"--{name.replace('_', '-')} expects {kind}, got {raw!r}.") from None


def _read_file(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path!r} does not exist; pass an existing .json or .yaml file to --config.")
    text = p.read_text()
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError("reading YAML needs PyYAML; run `pip install pyyaml` or use a .json file.") from None
        data = yaml.safe_load(text) or {}
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {path!r} is not valid JSON ({e.msg} at line {e.lineno}); fix it or use YAML.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of field names to values.")
    return data


def _unknown(name: str) -> ConfigError:
    names = [f.name for f in dataclasses.fields(Config)]
    close = difflib.get_close_matches(name.lstrip("-").replace("-", "_"), names, n=1)
    tip = f" Did you mean --{close[0].replace('_', '-')}?" if close else " Run with --help to list every flag."
    return ConfigError(f"unknown option {name!r}.{tip}")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one sentence, no usage dump
        raise ConfigError(message[0].upper() + message[1:] + ". Run with --help to list every flag.")


def build_parser(prog: str = "train.py", description: str = "") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=description,
                     usage="%(prog)s [--preset NAME] [--config FILE] [--FIELD VALUE ...]")
    parser.add_argument("--config", metavar="FILE", help="a .json or .yaml file of field values (applied after the preset)")
    docs, hints = field_docs(), _hints()
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if f.name == "preset":
            parser.add_argument(flag, default="", metavar="NAME",
                                help=f"{docs[f.name]} Without one: 'gpu' when CUDA is available, else 'cpu'.")
            continue
        shown = ",".join(default) if isinstance(default, list) else default
        kwargs = dict(dest=f.name, default=argparse.SUPPRESS, help=f"{docs[f.name]} (default: {shown!r})")
        if hints[f.name] is bool:  # `--no-corpus` alone means true; `--no-corpus false` also works
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        else:
            kwargs.update(metavar=f.name.upper())
        parser.add_argument(flag, **kwargs)
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = "train.py", description: str = "",
               default_preset: str | None = None, base: dict | None = None) -> Config:
    """Command line -> Config. Raises ConfigError (one sentence) on any bad input.
    `base` (e.g. a resumed run's config.json) replaces the preset as the starting values."""
    parser = build_parser(prog, description)
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra:
        raise _unknown(extra[0])
    flags = {k: v for k, v in vars(args).items() if k not in ("config", "preset")}
    if base is not None:
        args.preset = args.preset or base.get("preset", "")
    preset = args.preset or default_preset or auto_preset()
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}.")
    hints = _hints()
    values = {**PRESETS[preset]} if base is None else {k: v for k, v in older_run(base).items() if k in hints}
    if args.config:
        for k, v in _read_file(args.config).items():
            if k not in hints:
                raise _unknown(k)
            values[k] = _convert(k, v, hints[k])
    for k, v in flags.items():
        values[k] = _convert(k, v, hints[k])
    values["preset"] = preset
    return Config(**values)


def older_run(base: dict) -> dict:
    """A config.json written before --pool-fill, as the run it describes: --fixed-pool filled the
    pool with the examples, --pool-examples-when-empty with both, and --pool-max-age 0 kept none."""
    if "pool_fill" in base:
        return base
    fill = "examples" if base.get("fixed_pool") else "both" if base.get("pool_examples_when_empty") else "designs"
    keep = base.get("pool_max_age", 0) > 0 and not base.get("plain_fixed_pool")
    return {**base, "pool_fill": fill, "pool_keep": keep, "pool_max_age": base.get("pool_max_age") or 4}


def auto_preset() -> str:
    """'gpu' when CUDA is available, else 'cpu'."""
    try:
        import torch
        return "gpu" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def main_config(argv=None, **kwargs) -> Config:
    """parse_args for scripts: a ConfigError becomes one line on stderr and exit status 2."""
    try:
        return parse_args(argv, **kwargs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
