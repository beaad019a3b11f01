"""Real servers for the sync tests: OpenStack Placement (PyPI) and Prometheus (Debian).

Placement runs from its own virtualenv, created once and cached under
``$CORTEX_TEST_CACHE`` (default ``~/.cache/cortex-test``) as
``placement-venv-<version>``, with SQLite and ``[api] auth_strategy = noauth2``,
behind the standard library's WSGI server on a loopback port. Prometheus is the
``prometheus`` binary of the Debian package, started on a loopback port over a
TSDB that ``promtool tsdb create-blocks-from openmetrics`` filled.

``python3 tests/real_servers.py prepare`` (run by ``tests/run.sh``) builds the
Placement virtualenv and upstream Nova's two (``tests/differential/nova_venv.py``: the
differential suite's and the Nova-in-the-loop tests' with Nova's functional harness),
checks Prometheus and promtool exist and makes a PostgreSQL
answer (``tests/pg_cluster.py``); it imports nothing of Cortex, so it runs before
Cortex is installed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

PLACEMENT_VERSION = os.environ.get("CORTEX_TEST_PLACEMENT_VERSION", "16.0.0")
CACHE = Path(os.environ.get("CORTEX_TEST_CACHE", Path.home() / ".cache" / "cortex-test"))

# Runs inside the Placement virtualenv: Placement's own WSGI app under wsgiref, threaded.
PLACEMENT_SERVER = textwrap.dedent("""
    import sys
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from placement import wsgi


    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True


    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args):
            pass


    application = wsgi.init_application()
    server = make_server("127.0.0.1", int(sys.argv[1]), application,
                         server_class=Server, handler_class=QuietHandler)
    print("placement ready", flush=True)
    server.serve_forever()
""")


class ServerUnavailable(RuntimeError):
    """A real server could not be installed or started; the message says what to do."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cached_venv(name: str, requirement: str | tuple[str, ...],
                check: str | None = None) -> Path:
    """The virtualenv ``$CORTEX_TEST_CACHE/<name>`` with ``requirement`` installed.

    ``requirement`` is one pip requirement or several, installed in one resolution.
    Built on first use under a file lock and marked complete (``.complete``) only at
    the end, so concurrent sessions neither race nor use half an install (a half one
    is rebuilt). ``check``, when given, is Python code the new interpreter must run
    without error. Raises ServerUnavailable when the build fails.
    """
    requirements = (requirement,) if isinstance(requirement, str) else tuple(requirement)
    target = CACHE / name
    complete = target / ".complete"
    if complete.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
            subprocess.run([str(target / "bin" / "pip"), "install", "-q", *requirements],
                           check=True)
            if check:
                subprocess.run([str(target / "bin" / "python"), "-c", check], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ServerUnavailable(f"cannot build the virtualenv {name}: {exc}") from None
        complete.write_text("\n".join(requirements))
    return target


def placement_venv(version: str = PLACEMENT_VERSION) -> Path:
    """The cached virtualenv with ``openstack-placement==version`` (:func:`cached_venv`)."""
    return cached_venv(f"placement-venv-{version}", f"openstack-placement=={version}")


def wait_for(url: str, process: subprocess.Popen, seconds: float, log: Path) -> None:
    """Poll ``url`` until it answers (any HTTP status); ServerUnavailable if it never does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailable(f"{url}: server exited {process.returncode}: "
                                    f"{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise ServerUnavailable(f"{url} did not answer in {seconds:g} s: {log.read_text()[-2000:]}")


def start_placement(workdir: Path) -> tuple[subprocess.Popen, str]:
    """A real Placement on a fresh SQLite database in ``workdir``; (process, base URL)."""
    venv = placement_venv()
    (workdir / "placement.conf").write_text(textwrap.dedent(f"""
        [DEFAULT]
        debug = false
        [api]
        auth_strategy = noauth2
        [placement_database]
        connection = sqlite:///{workdir / 'placement.sqlite'}
        sync_on_startup = true
    """))
    script = workdir / "placement_server.py"
    script.write_text(PLACEMENT_SERVER)
    port = free_port()
    log = workdir / "placement.log"
    process = subprocess.Popen(
        [str(venv / "bin" / "python"), str(script), str(port)],
        env={"PATH": os.environ.get("PATH", ""), "OS_PLACEMENT_CONFIG_DIR": str(workdir)},
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    wait_for(url + "/", process, 120, log)
    return process, url


def prometheus_binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; ServerUnavailable naming the package."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if not all(found):
        raise ServerUnavailable("prometheus/promtool not found: apt-get install -y prometheus "
                                "(tests/run.sh does it)")
    return found  # type: ignore[return-value]


def start_prometheus(workdir: Path, openmetrics: str) -> tuple[subprocess.Popen, str]:
    """Prometheus over a TSDB backfilled from ``openmetrics`` text; (process, base URL)."""
    prometheus, promtool = prometheus_binaries()
    data = workdir / "data"
    data.mkdir()
    source = workdir / "samples.om"
    source.write_text(openmetrics)
    backfill = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                               str(source), str(data)], capture_output=True, text=True)
    if backfill.returncode:
        raise ServerUnavailable(f"promtool backfill failed: {backfill.stderr[-2000:]}")
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = free_port()
    log = workdir / "prometheus.log"
    process = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    wait_for(url + "/-/ready", process, 60, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # /-/ready answers 503 while the TSDB loads
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=2).close()
            break
        except OSError:
            time.sleep(0.2)
    return process, url


def stop(process: subprocess.Popen) -> None:
    """Terminate a server process, killing it after 10 s."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def prepare() -> None:
    """Make every real server the suite needs ready; print the shell line that names them.

    Progress goes to stderr; stdout carries only ``export CORTEX_TEST_DATABASE_URL=...``
    for ``eval`` (left out when the variable is already set: that server is the
    caller's choice, and the suite checks that it answers).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.differential.nova_venv import nova_functional_venv, nova_venv
    from tests.pg_cluster import ClusterUnavailable, ensure_server

    print(f"placement virtualenv: {placement_venv()}", file=sys.stderr)
    print(f"nova virtualenv (differential suite): {nova_venv()}", file=sys.stderr)
    print(f"nova functional virtualenv (Nova in the loop): {nova_functional_venv()}",
          file=sys.stderr)
    print("prometheus, promtool: {}, {}".format(*prometheus_binaries()), file=sys.stderr)
    if os.environ.get("CORTEX_TEST_DATABASE_URL"):
        return
    try:
        url = ensure_server()
    except ClusterUnavailable as exc:
        raise ServerUnavailable(str(exc)) from None
    print(f"postgresql: {url}", file=sys.stderr)
    print(f"export CORTEX_TEST_DATABASE_URL={url}")


if __name__ == "__main__":
    if sys.argv[1:] != ["prepare"]:
        sys.exit("usage: python3 tests/real_servers.py prepare")
    try:
        prepare()
    except ServerUnavailable as exc:
        sys.exit(f"tests/real_servers.py: {exc}")
