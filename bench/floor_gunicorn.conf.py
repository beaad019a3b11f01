"""gunicorn settings for the floors of bench/latency.py: the shipped ones
(etc/cortex/gunicorn.conf.py) without Cortex's worker hooks, which would build and warm
Cortex's app, with its threads and a database of the default path, in every floor
worker."""
import runpy
from pathlib import Path

_SHIPPED = runpy.run_path(str(Path(__file__).resolve().parents[1] / "etc/cortex/gunicorn.conf.py"))
_SERVING = ("bind", "workers", "threads", "worker_class", "timeout", "graceful_timeout",
            "keepalive", "max_requests", "max_requests_jitter", "accesslog", "errorlog",
            "loglevel")
globals().update({name: _SHIPPED[name] for name in _SERVING})
