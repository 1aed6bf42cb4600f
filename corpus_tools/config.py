"""Typed dataclass configs -> argparse, with an optional JSON config file.

Every stage has `@dataclass class XConfig` (fields carry their --help text in metadata) and
`main(cfg) -> dict`; the CLI is `parse(XConfig, argv)` + `main`. Precedence: defaults < --config
file < command-line flags. The resolved config is written into the stage's manifest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def field(default: Any, help: str, **kw) -> Any:
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return dataclasses.field(default=default, metadata={"help": help, **kw})


def build_parser(cls: type, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog, description=description or cls.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", type=Path, help="JSON file with any of the options below (flags override it)")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        origin = typing.get_origin(kind)
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_ = f"{f.metadata.get('help', '')} (default: {default})"
        if kind is bool:
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_)
        elif origin is list:
            ap.add_argument(flag, nargs="+", type=args[0] if args else str, default=None, help=help_)
        else:
            base = args[0] if origin is typing.Union and args else kind
            choices = f.metadata.get("choices")
            ap.add_argument(flag, type=base, default=None, choices=choices, help=help_)
    return ap


def parse(cls: type[T], argv: list[str] | None = None, prog: str | None = None) -> T:
    ap = build_parser(cls, prog=prog)
    ns = vars(ap.parse_args(argv))
    values: dict[str, Any] = {}
    if ns.pop("config"):
        path = Path(ap.parse_args(argv).config)
        try:
            values.update(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as e:
            ap.error(f"--config {path}: {e}")
    values.update({k: v for k, v in ns.items() if v is not None})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        ap.error(f"unknown option(s) in config: {', '.join(sorted(unknown))}")
    return cls(**values)


def to_dict(cfg: Any) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}


def run_command(name: str, fn: Callable[[list[str]], Any], argv: list[str]) -> int:
    """Run a stage's cli(argv) as the command `korbert NAME`: a user mistake (InputError, a missing
    file) is one line on stderr and exit status 2, not a traceback; Ctrl-C is 130; a closed pipe
    (output into `head`) stops quietly. `korbert` and each stage's `python -m` entry share it."""
    from corpus_tools.text import InputError

    try:
        fn(argv)
    except (InputError, FileNotFoundError, NotADirectoryError, PermissionError) as e:
        print(f"korbert {name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"korbert {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0
