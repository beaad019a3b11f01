"""The generated references of the documentation, written from the code at every build.

A page holds a marker line ``% cortex-reference: KIND`` (a MyST comment, so the page
reads as it is without this extension); at ``source-read`` the marker is replaced by
Markdown generated from the code, so the references cannot go stale:

- ``config``: every option of :data:`cortex.conf.OPTIONS` (what ``cortex-manage config
  sample`` prints), by section, with its default, what it accepts and its variable;
- ``environment``: the ``CORTEX_*`` variables that are not options;
- ``api``: every path, operation, parameter and schema of ``cortex/api/openapi.yaml``;
- ``cli``: the ``--help`` of every console script of ``setup.cfg`` and its sub-commands,
  from their argument parsers (each exposes ``build_parser()``);
- ``extras``: the install extras of ``setup.cfg`` and the packages each brings;
- ``plugins``: every filter, weigher and descheduler detector of the registry, from its
  module docstring, with its options;
- ``alerts``, ``grafana``: the shipped Prometheus rules and Grafana dashboard's panels;
- ``modules``: every package and module of ``cortex/`` with its docstring's first line;
- ``topics``: a toctree of the top-level ``docs/*.md`` pages the page does not list.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^% cortex-reference: (\w+)[ \t]*$", re.M)


def cell(text: Any) -> str:
    """``text`` on one line, safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: Any) -> str:
    """``text`` as inline code (empty values shown as an empty string literal)."""
    text = str(text)
    if text == "":
        return "`''`"
    ticks = "``" if "`" in text else "`"
    return f"{ticks}{text}{ticks}".replace("|", "\\|")


def heading(level: int, text: str) -> str:
    return f"{'#' * level} {text}\n"


# --- configuration ------------------------------------------------------------------

def config_reference() -> str:
    from cortex import conf

    out = ["Every option can be set in the file (`[section] name = value`) or by its "
           "environment variable, which wins. An unknown section, option or `CORTEX_*` "
           "variable is refused at start. `cortex-manage config sample` prints the same "
           "options as a commented file.\n"]
    section = None
    for option in conf.OPTIONS:
        if option.section != section:
            section = option.section
            out += ["", heading(2, f"[{section}]"),
                    "| option | default | accepts | environment variable | what it does |",
                    "|---|---|---|---|---|"]
        default = str(option.default).lower() if option.type is bool else option.default
        out.append(f"| {code(option.name)} | {code(default)} | {cell(option.allowed())} "
                   f"| {code(conf.env_name(option))} | {cell(option.help)} |")
    return "\n".join(out) + "\n"


def environment_reference() -> str:
    from cortex import conf

    out = ["| variable | read by |", "|---|---|"]
    out += [f"| {code(name)} | {cell(purpose)} |"
            for name, purpose in sorted(conf.OTHER_VARIABLES.items())]
    out.append(f"| {', '.join(code(p + '*') for p in conf.OTHER_PREFIXES)} "
               "| the test suite and the benchmarks |")
    return "\n".join(out) + "\n"


# --- REST API -----------------------------------------------------------------------

def _schema_type(schema: dict) -> str:
    """A short Markdown description of a schema's type (links to named schemas)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            joiner = " and " if key == "allOf" else " or "
            return joiner.join(_schema_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and "items" in schema:
        return f"array of {_schema_type(schema['items'])}"
    extra = []
    if "enum" in schema:
        extra.append("one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"]))
    for key, word in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >="),
                      ("maxLength", "length <="), ("minItems", "items >="),
                      ("maxItems", "items <=")):
        if key in schema:
            extra.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        extra.append(f"pattern {code(schema['pattern'])}")
    return kind + (f" ({', '.join(extra)})" if extra else "")


def _media_schema(content: dict | None) -> str:
    if not content:
        return ""
    return "; ".join(f"{media}: {_schema_type(body.get('schema', {}))}"
                     for media, body in content.items())


def api_reference() -> str:
    spec = yaml.safe_load((REPO / "cortex" / "api" / "openapi.yaml").read_text())
    out = [f"Generated from `cortex/api/openapi.yaml` (OpenAPI {spec['openapi']}, "
           f"document version {spec['info']['version']}); the service serves the same "
           "document at `GET /openapi.json` and validates every request body against it.\n",
           spec["info"].get("description", ""), "", heading(2, "Paths")]
    for path, item in spec["paths"].items():
        out.append(heading(3, f"`{path}`"))
        if item.get("description"):
            out += [item["description"].strip(), ""]
        shared = item.get("parameters", [])
        for method in ("get", "head", "post", "put", "patch", "delete"):
            operation = item.get(method)
            if operation is None:
                continue
            out += [heading(4, f"{method.upper()} `{path}`"),
                    operation.get("summary", "").strip(), ""]
            if operation.get("description"):
                out += [operation["description"].strip(), ""]
            parameters = shared + operation.get("parameters", [])
            if parameters:
                out += ["| parameter | in | required | type | description |",
                        "|---|---|---|---|---|"]
                for p in parameters:
                    if "$ref" in p:
                        p = spec["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
                    out.append(f"| {code(p['name'])} | {p['in']} | "
                               f"{'yes' if p.get('required') else 'no'} | "
                               f"{cell(_schema_type(p.get('schema', {})))} | "
                               f"{cell(p.get('description', ''))} |")
                out.append("")
            body = operation.get("requestBody")
            if body:
                out += [f"Request body{' (required)' if body.get('required') else ''}: "
                        f"{_media_schema(body.get('content'))}", ""]
            out += ["| status | description | body |", "|---|---|---|"]
            for status, response in operation["responses"].items():
                out.append(f"| {status} | {cell(response.get('description', ''))} | "
                           f"{cell(_media_schema(response.get('content')))} |")
            out.append("")
    out.append(heading(2, "Schemas"))
    for name, schema in spec["components"]["schemas"].items():
        out += [f"({'schema-' + name.lower()})=", heading(3, name)]
        if schema.get("description"):
            out += [schema["description"].strip(), ""]
        properties = schema.get("properties")
        if properties:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, sub in properties.items():
                out.append(f"| {code(field)} | {cell(_schema_type(sub))} | "
                           f"{'yes' if field in required else 'no'} | "
                           f"{cell(sub.get('description', ''))} |")
            out.append("")
        else:
            out += [f"Type: {_schema_type(schema)}", ""]
    return "\n".join(out) + "\n"


# --- command line -------------------------------------------------------------------

def console_scripts() -> list[tuple[str, str]]:
    """``[(script, "module:function")]`` of setup.cfg's console_scripts."""
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    lines = parser.get("options.entry_points", "console_scripts").strip().splitlines()
    return [tuple(part.strip() for part in line.split("=", 1)) for line in lines]


def _parsers(parser: argparse.ArgumentParser, words: list[str]):
    """``(command words, parser)`` of ``parser`` and every sub-command under it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, words + [name])


def cli_reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same at every build
    out = []
    for script, target in console_scripts():
        module = importlib.import_module(target.split(":")[0])
        out += [heading(2, script), f"Entry point `{target}`.", ""]
        for words, parser in _parsers(module.build_parser(), [script]):
            if len(words) > 1:
                out.append(heading(3, " ".join(words)))
            out += ["```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def extras_reference() -> str:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    out = ["| extra | install | brings |", "|---|---|---|"]
    for extra, text in parser.items("options.extras_require"):
        packages = [line.strip() for line in text.strip().splitlines() if line.strip()]
        install = f"pip install 'cortex-scheduler[{extra}]'"
        out.append(f"| {code(extra)} | {code(install)} "
                   f"| {cell(', '.join(packages))} |")
    out += ["", "What each command needs, as its `--help` says it:", "",
            "| command | needs |", "|---|---|"]
    for script, target in console_scripts():
        module = importlib.import_module(target.split(":")[0])
        epilog = module.build_parser().epilog or ""
        out.append(f"| `{script}` | {cell(epilog.removeprefix('Install: '))} |")
    return "\n".join(out) + "\n"


# --- plugins ------------------------------------------------------------------------

def _docstring(text: str) -> str:
    """A docstring's reST-isms as Markdown: ``literal`` and :role:`target` become code."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: code(m.group(1)), text)
    return re.sub(r"``(.+?)``", lambda m: code(m.group(1)), text)


def source_of(doc: str) -> str:
    """What a plugin's rule follows, as its docstring opens it (up to the first colon)."""
    body = " ".join(doc.split("\n\n", 1)[1].split()) if "\n\n" in doc else ""
    body = body.removeprefix("Rule: ").removeprefix("Rule ")
    cut = min((i for i in (body.find(": "), body.find(". ")) if i > 0), default=len(body))
    text = body[:cut] if cut <= 160 else body[:160].rsplit(" ", 1)[0] + " ..."
    return _docstring(text) or "—"


def plugins_reference() -> str:
    from cortex.plugins.base import describe_options
    from cortex.plugins.registry import DETECTORS, FILTERS, WEIGHERS, load_in_tree

    load_in_tree()
    out = ["Generated from the plugin registry (`cortex/plugins/registry.py`): every "
           "in-tree plugin, with its module's documentation (the rule and its source) and "
           "its options, which a pipeline sets per step in `pipelines.yaml`. "
           "`cortex-manage plugins list` prints the same catalogue.\n"]
    kinds = (("Filters", FILTERS), ("Weighers", WEIGHERS), ("Descheduler detectors", DETECTORS))
    out += ["| plugin | services | the rule follows |", "|---|---|---|"]
    for _, table in kinds[:2]:
        for name, cls in sorted(table.items()):
            doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
            out.append(f"| [{name}](#{name.replace('_', '-')}) | "
                       f"{', '.join(getattr(cls, 'services', ('nova',)))} | "
                       f"{cell(source_of(doc))} |")
    out.append("")
    for title, table in kinds:
        out.append(heading(2, title))
        for name, cls in sorted(table.items()):
            services = ", ".join(getattr(cls, "services", ("nova",)))
            doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
            doc = doc.removeprefix(f"{name}: ")
            out += [heading(3, name), f"Services: {services}. Module `{cls.__module__}`.", "",
                    _docstring(doc), ""]
            options = describe_options(cls) if dataclasses.is_dataclass(
                getattr(cls, "Options", None)) else []
            if options:
                out += ["| option | type | default |", "|---|---|---|"]
                out += [f"| {code(o)} | {code(t)} | {code(json.dumps(d, default=str))} |"
                        for o, t, d in options]
                out.append("")
                about = inspect.getdoc(cls.Options) or ""
                if about and not about.startswith("Options("):  # not dataclass's own text
                    out += [_docstring(about), ""]
    return "\n".join(out) + "\n"


# --- code layout --------------------------------------------------------------------

def modules_reference() -> str:
    """Every package and module of ``cortex/`` with the first line of its docstring."""
    import ast

    out = []
    root = REPO / "cortex"
    packages = sorted({p.parent for p in root.rglob("*.py") if "__pycache__" not in p.parts})
    for package in packages:
        name = package.relative_to(REPO).as_posix()
        out += ["", f"`{name}/`", ""]
        for path in sorted(package.glob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            first = doc.strip().splitlines()[0] if doc.strip() else "—"
            out.append(f"- `{path.name}`: {_docstring(first)}")
    return "\n".join(out) + "\n"


# --- observability ------------------------------------------------------------------

def alerts_reference() -> str:
    rules = yaml.safe_load((REPO / "etc" / "cortex" / "prometheus-alerts.yaml").read_text())
    out = ["| alert | severity | for | expression | description |", "|---|---|---|---|---|"]
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            notes = rule.get("annotations", {})
            out.append(f"| {code(rule['alert'])} | {rule.get('labels', {}).get('severity', '')} "
                       f"| {rule.get('for', '')} | {code(' '.join(rule['expr'].split()))} "
                       f"| {cell(notes.get('description', notes.get('summary', '')))} |")
    return "\n".join(out) + "\n"


def grafana_reference() -> str:
    board = json.loads((REPO / "etc" / "cortex" / "grafana-dashboard.json").read_text())
    out = [f"The dashboard \"{cell(board.get('title', ''))}\", row by row:", ""]
    for panel in board["panels"]:
        if panel.get("type") == "row":
            out += ["", f"- **{cell(panel.get('title', ''))}**"]
        else:
            out.append(f"  - {cell(panel.get('title', ''))}")
    return "\n".join(out) + "\n"


GENERATORS = {"alerts": alerts_reference, "grafana": grafana_reference,
              "modules": modules_reference,
              "config": config_reference, "environment": environment_reference,
              "api": api_reference, "cli": cli_reference, "extras": extras_reference,
              "plugins": plugins_reference}


def topics_toctree(page: str) -> str:
    """A toctree of the top-level pages ``docs/*.md`` that ``page`` does not list itself.

    Topic pages are added beside the site's own sections; each is in the site (and the
    build has no "not in any toctree" warning) whether or not the index names it yet.
    """
    listed = set(re.findall(r"^([\w/.-]+)$", page, re.M))
    rest = [path.stem for path in sorted((REPO / "docs").glob("*.md"))
            if path.stem != "index" and path.stem not in listed]
    if not rest:
        return ""
    return "```{toctree}\n:caption: More topics\n:maxdepth: 2\n\n" + "\n".join(rest) + "\n```\n"


def fill(app, docname: str, source: list[str]) -> None:
    """``source-read``: replace each marker line with its generated Markdown."""
    def generated(match: re.Match) -> str:
        kind = match.group(1)
        if kind == "topics":
            return topics_toctree(source[0])
        if kind not in GENERATORS:
            raise ValueError(f"{docname}: unknown cortex-reference {kind!r} "
                             f"(known: {', '.join(GENERATORS)})")
        return GENERATORS[kind]()

    source[0] = MARKER.sub(generated, source[0])


def generated_pages(app, env, added, changed, removed) -> list[str]:
    """``env-get-outdated``: the pages with markers are read again at every build."""
    return [docname for docname in env.found_docs
            if MARKER.search(Path(env.doc2path(docname)).read_text())]


def setup(app):
    sys.path.insert(0, str(REPO))
    app.connect("source-read", fill)
    app.connect("env-get-outdated", generated_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
