"""In-process latency of the external endpoints on the bundled bodies (no HTTP server).

Run: .venv/bin/python bench/pipeline_latency.py [--repeat N]
Uses an embedded SQLite database with the demo fleet, so it needs no PostgreSQL.
Prints p50/p99 in milliseconds per body; the HTTP-floor comparison through gunicorn
is a separate benchmark.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cortex import conf
from cortex.api.app import create_app
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.store.fleet import import_fleet, read_fleet

REPO = Path(__file__).resolve().parents[1]
BODIES = ["nova/cpu-general-purpose", "nova/gpu-2xh100-pinned",
          "nova/gpu-2xh100-pinned-1000-hosts", "cinder/create-volume-thin-qos",
          "manila/create-share-nfs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.sqlite"
        engine = make_engine(url)
        migrate.upgrade(engine)
        with engine.begin() as connection:
            import_fleet(connection, read_fleet(REPO / "etc/cortex/demo-fleet.yaml"))
        app = create_app(conf.load(environ={}, overrides={"database.connection": url}),
                         engine=engine)
        client = app.test_client()
        print(f"{'body':45} {'hosts':>5} {'p50 ms':>8} {'p99 ms':>8}")
        for name in BODIES:
            service = name.split("/")[0]
            data = (REPO / "tests/fixtures" / f"{name}.json").read_bytes()
            hosts = len(json.loads(data)["hosts"])
            samples = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                response = client.post(f"/scheduler/{service}/external", data=data,
                                       content_type="application/json")
                samples.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            samples.sort()
            p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
            print(f"{name:45} {hosts:5d} {statistics.median(samples):8.2f} {p99:8.2f}")
        app.extensions["cortex"].decisions.close()


if __name__ == "__main__":
    main()
