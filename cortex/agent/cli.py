"""cortex-agent: print the host's topology, or report it to the Cortex API periodically.

``cortex-agent --once --print`` prints the report as JSON. ``cortex-agent --report URL``
posts it to ``URL/v1/topology/<host>`` every ``--interval`` seconds (once with
``--once``), sending ``X-Auth-Token`` from ``--token-file`` or ``$CORTEX_AGENT_TOKEN``
when one is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from cortex.agent.report import build_report
from cortex.cli import parser as command_parser
from cortex.cli import run

LOG = logging.getLogger("cortex.agent")
TOKEN_ENV = "CORTEX_AGENT_TOKEN"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--print`` or ``--report`` is required."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.print_ and not args.report:
        parser.error("nothing to do: give --print and/or --report URL")
    return args


def build_parser() -> argparse.ArgumentParser:
    """The command line of cortex-agent."""
    parser = command_parser(
        "cortex-agent", __doc__.split("\n\n")[0],
        needs="the agent extra (pip install 'cortex-scheduler[agent]', NVIDIA's NVML "
              "bindings); without it the report says so and carries no GPUs.")
    parser.add_argument("--once", action="store_true", help="collect once and exit")
    parser.add_argument("--print", dest="print_", action="store_true",
                        help="print the report as JSON on stdout")
    parser.add_argument("--report", metavar="URL", help="Cortex API base URL to post to")
    parser.add_argument("--interval", type=float, default=60.0,
                        help="seconds between reports (default 60)")
    parser.add_argument("--host", default=socket.gethostname(),
                        help="the nova-compute service host name (default: this hostname)")
    parser.add_argument("--token-file", help=f"file holding the token (else ${TOKEN_ENV})")
    parser.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout in seconds")
    parser.add_argument("--sysfs-root", default="/", help="root under which sys/ is read")
    parser.add_argument("--proc-root", default="/proc", help="procfs mount point")
    parser.add_argument("--nova-config", default="/etc/nova/nova.conf",
                        help="Nova's configuration (CPU sets, reserved huge pages)")
    return parser


def read_token(token_file: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The token from the file (stripped), else from ``$CORTEX_AGENT_TOKEN``, else None."""
    if token_file:
        with open(token_file, encoding="utf-8") as handle:
            return handle.read().strip() or None
    return (environ if environ is not None else os.environ).get(TOKEN_ENV) or None


def post_report(url: str, host: str, report: dict, token: str | None,
                timeout: float = 10.0) -> dict:
    """POST ``report`` to ``url/v1/topology/<host>``; the API's JSON answer.

    Raises RuntimeError with the API's error detail (or the connection error).
    """
    target = f"{url.rstrip('/')}/v1/topology/{urllib.parse.quote(host, safe='')}"
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-Auth-Token"] = token
    request = urllib.request.Request(target, data=json.dumps(report).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{target}: HTTP {exc.code}: {_detail(exc.read())}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"{target}: {exc}") from None


def _detail(body: bytes) -> str:
    """The ``detail`` of an API-WG error body, else the body's start."""
    try:
        return json.loads(body)["errors"][0]["detail"]
    except (ValueError, KeyError, IndexError, TypeError):
        return body[:200].decode(errors="replace")


def run_once(args: argparse.Namespace, nvml: Any = None, out=None) -> int:
    """Collect, print and/or post one report; 0 on success, 1 when posting failed."""
    report = build_report(args.host, nvml=nvml, sysfs_root=args.sysfs_root,
                          proc_root=args.proc_root, nova_config=args.nova_config)
    if args.print_:
        json.dump(report, out or sys.stdout, indent=2)
        (out or sys.stdout).write("\n")
    if args.report:
        try:
            answer = post_report(args.report, args.host, report,
                                 read_token(args.token_file), args.timeout)
        except RuntimeError as exc:
            LOG.error("report failed: %s", exc)
            return 1
        LOG.info("reported %d GPUs, %d NUMA cells: %s", len(report["gpus"]),
                 len(report["numa_cells"]), answer)
    return 0


def main(argv: list[str] | None = None, nvml: Any = None, stop: threading.Event | None = None,
         out=None) -> int:
    """Entry point of the ``cortex-agent`` console script; errors are one line (exit 1)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run("cortex-agent", args, lambda _: collect(args, nvml, stop, out), configured=False)


def collect(args: argparse.Namespace, nvml: Any = None, stop: threading.Event | None = None,
            out=None) -> int:
    """Report once (``--once`` or ``--print`` alone), else every ``--interval`` until ``stop``."""
    if args.once or not args.report:
        return run_once(args, nvml, out)
    stop = stop or threading.Event()
    while not stop.is_set():
        run_once(args, nvml, out)
        stop.wait(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
