"""PostgreSQL for the tests: the shared server the suite uses, and private clusters.

The suite talks to one PostgreSQL server (``$CORTEX_TEST_DATABASE_URL``, else
``127.0.0.1:5432`` as user ``postgres`` with trust authentication).
:func:`ensure_server` makes one answer on a fresh machine: it starts the Debian
clusters that exist, else initialises a private trust-auth cluster of its own under
``/var/tmp`` and starts it (on port 5432 when free). The binaries come from
Debian's ``postgresql`` package, which ``tests/run.sh`` installs when missing.

:class:`PrivateCluster` is a throw-away cluster (``initdb`` and ``pg_ctl`` on a
free port) for tests that must break a database: stop it, freeze it with SIGSTOP,
thaw it. PostgreSQL refuses to run as root; as root the cluster runs as the
``postgres`` user the Debian package creates.

Imports nothing of Cortex, so ``tests/real_servers.py prepare`` can use it before
Cortex is installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DEFAULT_PORT = 5432


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL could be found, installed or started; the message says why."""


def answers(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bindir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: Debian's newest, else the PATH's.

    Raises ClusterUnavailable naming the package to install.
    """
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                    key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    for candidate in (*reversed(debian), shutil.which("pg_ctl")):
        if candidate and Path(candidate).with_name("initdb").exists():
            return Path(candidate).parent
    raise ClusterUnavailable("initdb/pg_ctl not found: apt-get install -y postgresql "
                             "(tests/run.sh does it)")


def _owner() -> str | None:
    """The user the server runs as: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterUnavailable("running as root and there is no 'postgres' user to run "
                                 "PostgreSQL as (the postgresql package creates it)") from None
    return "postgres"


def _run(owner: str | None, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``owner`` (via runuser) or as ourselves; output captured as text."""
    if owner:
        argv = ["runuser", "-u", owner, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


class PrivateCluster:
    """A PostgreSQL cluster of its own in ``datadir`` on ``127.0.0.1:port``, trust auth.

    ``start()`` initialises the directory when empty and starts the server;
    ``stop()`` stops it (fast mode); ``freeze()``/``thaw()`` send SIGSTOP/SIGCONT to
    every process of the cluster (the server keeps its sockets open and answers
    nothing); ``url`` is a SQLAlchemy URL for user ``postgres``, database ``postgres``.
    Errors raise ClusterUnavailable with the server's own words.
    """

    def __init__(self, datadir: Path, port: int | None = None) -> None:
        self.datadir = Path(datadir)
        self.port = port or free_port()
        self.owner = _owner()
        self.bin = bindir()

    @property
    def url(self) -> str:
        """``postgresql+psycopg://postgres@127.0.0.1:<port>/postgres``."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _prepare_directory(self) -> None:
        """Create the data directory (mode 0700) owned by the server's user."""
        self.datadir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.owner:
            shutil.chown(self.datadir, self.owner, self.owner)
            parent = self.datadir.parent
            if parent.stat().st_mode & 0o001 == 0:
                raise ClusterUnavailable(f"{parent} is not searchable by {self.owner}")

    def start(self) -> PrivateCluster:
        """Initialise (when new) and start the cluster; wait until it accepts connections."""
        self._prepare_directory()
        if not (self.datadir / "PG_VERSION").exists():
            done = _run(self.owner, [str(self.bin / "initdb"), "-D", str(self.datadir),
                                     "-U", "postgres", "--auth=trust", "-E", "UTF8",
                                     "--no-sync"])
            if done.returncode:
                raise ClusterUnavailable(f"initdb failed: {done.stderr.strip()[-1000:]}")
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                   f"-c unix_socket_directories={self.datadir} -c fsync=off "
                   "-c full_page_writes=off -c max_connections=300")
        done = _run(self.owner, [str(self.bin / "pg_ctl"), "-D", str(self.datadir), "-o",
                                 options, "-l", str(self.datadir / "server.log"), "-w",
                                 "-t", "60", "start"])
        if done.returncode:
            log = self.datadir / "server.log"
            tail = log.read_text()[-1000:] if log.exists() else ""
            raise ClusterUnavailable(f"pg_ctl start failed: {done.stdout.strip()} {tail}")
        return self

    def pids(self) -> list[int]:
        """The postmaster's pid and those of its children (the backends and workers)."""
        pid_file = self.datadir / "postmaster.pid"
        if not pid_file.exists():
            return []
        postmaster = int(pid_file.read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                  text=True).stdout.split()
        return [postmaster, *map(int, children)]

    def freeze(self) -> None:
        """SIGSTOP every process of the cluster: connections stay open, nothing answers.

        The postmaster first, then its children as they are once it stopped forking:
        listing them first let a backend forked in between (a new connection of the
        pool or of the reservation feed) serve on through the freeze.
        """
        pids = self.pids()
        if pids:
            os.kill(pids[0], signal.SIGSTOP)
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT every process of the cluster."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        """Send ``signum`` to every process of the cluster; one that just exited is skipped.

        A backend whose client went away exits at any moment, between the listing of the
        processes and the signal (ProcessLookupError).
        """
        for pid in self.pids():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """Stop the server (fast shutdown); thaws it first so it can hear the signal."""
        self.thaw()
        _run(self.owner, [str(self.bin / "pg_ctl"), "-D", str(self.datadir), "-m", "fast",
                          "-w", "-t", "60", "stop"])


    def destroy(self) -> None:
        """Stop the server and delete its data directory's parent (a temporary cluster's)."""
        self.stop()
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def temporary_cluster() -> PrivateCluster:
    """A new, not yet started cluster in a fresh directory under ``/var/tmp``.

    ``destroy()`` removes it again; use it for tests that break their database.
    """
    base = Path(tempfile.mkdtemp(prefix="cortex-pg-", dir="/var/tmp"))
    base.chmod(0o755)
    return PrivateCluster(base / "data")


def _start_debian_clusters() -> None:
    """Start every Debian cluster (``pg_ctlcluster``) that exists; errors are ignored."""
    if not shutil.which("pg_ctlcluster"):
        return
    for version in glob.glob("/etc/postgresql/*/main"):
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect",
                        Path(version).parent.name, "main", "start"], capture_output=True)


def _trust_login(port: int) -> bool:
    """Whether user ``postgres`` logs in on ``127.0.0.1:port`` without a password.

    Asks ``psql -w`` (never prompts); without psql, a server that answers is assumed fine.
    """
    if not answers(port):
        return False
    psql = shutil.which("psql")
    if not psql:
        return True
    done = subprocess.run([psql, "-w", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                           "-d", "postgres", "-Atc", "select 1"], capture_output=True,
                          text=True, env={**os.environ, "PGPASSWORD": "", "PGCONNECT_TIMEOUT": "5"})
    return done.returncode == 0


def ensure_server() -> str:
    """A URL of a PostgreSQL server that lets user ``postgres`` in without a password.

    ``127.0.0.1:5432`` when a server there does (Debian's clusters are started first
    when they exist); else a private trust-auth cluster kept in
    ``/var/tmp/cortex-test-pg-<uid>`` and reused by later runs, on 5432 when that port
    is free. Raises ClusterUnavailable.
    """
    default = f"postgresql+psycopg://postgres@127.0.0.1:{DEFAULT_PORT}/postgres"
    if _trust_login(DEFAULT_PORT):
        return default
    if not answers(DEFAULT_PORT):
        _start_debian_clusters()
        for _ in range(20):
            if answers(DEFAULT_PORT):
                break
            time.sleep(0.5)
        if _trust_login(DEFAULT_PORT):
            return default
    datadir = Path(f"/var/tmp/cortex-test-pg-{os.getuid()}") / "data"
    datadir.parent.mkdir(exist_ok=True)
    datadir.parent.chmod(0o755)
    port_file = datadir.parent / "port"
    port = int(port_file.read_text()) if port_file.exists() else \
        (DEFAULT_PORT if not answers(DEFAULT_PORT) else free_port())
    if answers(port) and not _trust_login(port):
        port = free_port()  # someone else's server took the port since
    cluster = PrivateCluster(datadir, port)
    if not answers(port):
        cluster.start()
    port_file.write_text(str(port))
    return cluster.url
