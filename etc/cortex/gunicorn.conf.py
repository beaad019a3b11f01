"""Sample gunicorn settings for Cortex: ``gunicorn -c etc/cortex/gunicorn.conf.py
'cortex.wsgi:application'``. The app reads its own settings from $CORTEX_CONFIG_FILE."""

import multiprocessing
import os

# Nova waits for us inside every build with a 10 s (Cinder, Manila: 5 s) timeout:
# keep answers fast and never let a slow worker hold a caller past that.
bind = os.environ.get("CORTEX_BIND", "127.0.0.1:8080")
workers = int(os.environ.get("CORTEX_WORKERS", min(4, multiprocessing.cpu_count())))
threads = int(os.environ.get("CORTEX_THREADS", "4"))
worker_class = "gthread"
timeout = 30
graceful_timeout = 10  # SIGTERM: finish requests, flush the decision log
keepalive = 5
max_requests = 100000
max_requests_jitter = 1000
accesslog = "-"
errorlog = "-"
loglevel = "info"


def worker_exit(server, worker):
    """On SIGTERM (graceful stop), write the decisions still queued before exiting."""
    from cortex.wsgi import shutdown

    shutdown()
