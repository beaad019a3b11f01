"""Sample gunicorn settings for Cortex: ``gunicorn -c etc/cortex/gunicorn.conf.py
'cortex.wsgi:application'``. The app reads its own settings from $CORTEX_CONFIG_FILE."""

import glob
import multiprocessing
import os
import tempfile
import time

# Metrics across workers (prometheus-client multi-process mode): every worker writes its
# values to files in this directory and /metrics adds them up. It must be set before a
# worker imports prometheus_client, so here, and emptied at every start (on_starting).
# Set PROMETHEUS_MULTIPROC_DIR yourself to choose the place (a tmpfs is best).
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="cortex-metrics-")

# Nova waits for us inside every build with a 10 s (Cinder, Manila: 5 s) timeout:
# keep answers fast and never let a slow worker hold a caller past that.
bind = os.environ.get("CORTEX_BIND", "127.0.0.1:8080")
workers = int(os.environ.get("CORTEX_WORKERS", min(4, multiprocessing.cpu_count())))
# A thread is held by a request from its first byte to its answer, its body included.
# Bodies are read whole by the API (cortex.api.guard.BodyGuard: 408 after 5 s), so a
# client that trickles its body holds a thread for at most that long; with 16 threads a
# worker keeps serving Nova while a handful of such clients come and go (8 slow clients
# against 2 workers: p99 unchanged, tests/functional/test_slow_clients.py). Threads
# waiting on a socket cost no CPU. For hostile networks, put a buffering proxy in front.
threads = int(os.environ.get("CORTEX_THREADS", "16"))
worker_class = "gthread"
timeout = 30
graceful_timeout = 10  # SIGTERM: finish requests, flush the decision log
keepalive = 5
max_requests = 100000
max_requests_jitter = 1000
accesslog = "-"
errorlog = "-"
loglevel = "info"


def post_fork(server, worker):
    """In the new worker: its start, which its warm-up's time budget counts from."""
    worker.cortex_started = time.monotonic()


def post_worker_init(worker):
    """Before the worker accepts a connection: load the knowledge view and warm its tables
    for at most ``[api] warm_up_timeout`` seconds from its start (cortex.services.warmup;
    ``[api] warm_up = false`` skips it)."""
    from cortex.wsgi import warm_up

    warm_up(worker.cortex_started)


def worker_exit(server, worker):
    """On SIGTERM (graceful stop), write the decisions still queued before exiting."""
    from cortex.wsgi import shutdown

    shutdown()


def on_starting(server):
    """Start with no metric files of an earlier run (prometheus-client's rule), and with
    Cortex's code imported once, here, for every worker forked from this process
    (cortex.wsgi.preload): a worker started under load serves seconds sooner. New code
    therefore takes a restart (or gunicorn's USR2 upgrade), not a HUP."""
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    for path in glob.glob(os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], "*.db")):
        os.remove(path)
    from cortex.wsgi import preload

    preload()


def child_exit(server, worker):
    """A worker is gone: its live gauges (decision queue depth) stop counting."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
