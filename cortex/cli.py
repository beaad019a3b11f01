"""What the console scripts share (cortex/cmd, cortex-agent): one-line errors, ``--debug``, ``-f``.

:func:`run` runs a command's body and turns what goes wrong into one line on stderr
and an exit status (``--debug`` re-raises instead, for the traceback):

- 2: a usage, configuration or input error (:class:`cortex.conf.ConfigError`, a
  command's own error types, a missing optional extra);
- 1: the database failed (the line names its URL without the password), a
  :class:`CommandError`, or anything unexpected (``prog: error: Type: message``);
- 141 (128 + SIGPIPE, as a shell reports ``yes | head -1``): stdout was closed by its
  reader; nothing more is written. 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import yaml

from cortex import conf as config

#: The top-level modules of the optional extras (setup.cfg ``extras_require``).
EXTRAS = {"openstack": "sync", "keystoneauth1": "sync", "requests": "sync",
          "pynvml": "agent", "keystonemiddleware": "keystone", "matplotlib": "simulate",
          "orjson": "fast"}
FORMATS = ("table", "json", "yaml", "value")


class CommandError(Exception):
    """A failure worth one line to the user; ``code`` is the exit status (default 1)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def parser(prog: str, description: str | None, needs: str) -> argparse.ArgumentParser:
    """An ArgumentParser for ``prog`` with the global ``--debug`` flag.

    ``needs`` says which install extras the command needs (``--help`` ends with it):
    every command states its own, so none is found by its error.
    """
    result = argparse.ArgumentParser(prog=prog, description=description,
                                     epilog=f"Install: {needs}")
    result.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line")
    return result


def missing_extra(module: str, extra: str | None = None) -> CommandError:
    """The error (exit 2) naming the pip command that installs ``module``'s extra."""
    extra = extra or EXTRAS[module.split(".")[0]]
    return CommandError(f"{module.split('.')[0]} is not installed: "
                        f"pip install 'cortex-scheduler[{extra}]'", code=2)


def require_extra(extra: str, *modules: str) -> None:
    """Raise :func:`missing_extra`'s error unless every module of ``modules`` can be imported.

    Looks the modules up without importing them (cheap): a command calls this before
    it starts work it could not finish.
    """
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise missing_extra(module, extra)


def one_line(text: object) -> str:
    """``str(text)`` with its line breaks and runs of blanks made single spaces."""
    return " ".join(str(text).split())


def run(prog: str, args: argparse.Namespace, body: Callable[[config.Config | None], int],
        expected: tuple[type[Exception], ...] = (), configured: bool = True) -> int:
    """``body(conf)``'s exit status, or the status of its error after one line on stderr.

    ``conf`` is ``cortex.conf.load(args.config_file)`` when ``configured`` (else None);
    ``expected`` are the command's input errors (exit 2 with their message). Stdout is
    flushed here, so a reader that closed the pipe early is noticed here too. With
    ``args.debug`` every error but a closed pipe is re-raised.
    """
    url = None
    try:
        conf = config.load(args.config_file) if configured else None
        url = conf.database_url if conf else None
        code = body(conf)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _stdout_to_devnull()
        return 141
    except KeyboardInterrupt:
        if args.debug:
            raise
        return 130
    except Exception as exc:
        if args.debug:
            raise
        code, message = _describe(exc, url, expected)
        print(f"{prog}: {message}", file=sys.stderr)
        return code


def _describe(exc: Exception, url: str | None,
              expected: tuple[type[Exception], ...]) -> tuple[int, str]:
    """The exit status and the one-line message of ``exc``."""
    if isinstance(exc, (config.ConfigError, *expected)):
        return 2, one_line(exc)
    if isinstance(exc, CommandError):
        return exc.code, one_line(exc)
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in EXTRAS:
        error = missing_extra(exc.name)
        return error.code, str(error)
    if type(exc).__module__.startswith("sqlalchemy.") and url:
        from sqlalchemy.engine import make_url  # not at import: cortex-agent has no database
        from sqlalchemy.exc import DBAPIError

        if isinstance(exc, DBAPIError):
            shown = make_url(url).render_as_string(hide_password=True)
            return 1, f"database {shown}: {one_line(exc.orig)}"
    return 1, f"error: {type(exc).__name__}: {one_line(exc)} (use --debug for the traceback)"


def _stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so the interpreter's last flush is quiet.

    What the Python documentation recommends for SIGPIPE (library/signal.html, "Note on
    SIGPIPE"); a stdout without a descriptor (a test's capture) is left alone.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def add_format(command: argparse.ArgumentParser) -> None:
    """Give a list command ``-f/--format table|json|yaml|value`` (default table)."""
    command.add_argument("-f", "--format", choices=FORMATS, default="table",
                         help="output format (default: table)")


def emit(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fmt: str,
         document: Any = None) -> None:
    """Print ``rows`` on stdout in ``fmt``, as the OpenStack client's list commands do.

    ``table``: a header of ``columns`` and fixed-width columns; ``value``: each row's
    ``columns`` separated by single spaces, no header, one row per line. Empty values
    (None, ``[]``) print as ``-``; lists as ``a,b``; mappings as ``k=v,k=v``. ``json`` and
    ``yaml``: ``document`` (default: the rows with all their keys), whole.
    """
    if fmt in ("json", "yaml"):
        plain = json.loads(json.dumps(rows if document is None else document, default=str))
        text = json.dumps(plain, indent=2) + "\n" if fmt == "json" else yaml.dump(
            plain, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
        sys.stdout.write(text)
        return
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    if fmt == "value":
        for line in cells:
            print(" ".join(line))
        return
    widths = [max(len(c) for c in column) for column in zip(columns, *cells, strict=True)]
    for line in (list(columns), ["-" * w for w in widths], *cells):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper writing multi-line strings (plugin docs) as ``|`` blocks."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def _cell(value: Any) -> str:
    """One value as a table or value cell (see :func:`emit`)."""
    if isinstance(value, Mapping):
        value = [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, Iterable) and not isinstance(value, str):
        value = ",".join(str(v) for v in value)
    return "-" if value is None or value == "" else str(value)
