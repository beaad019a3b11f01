"""The HTTP floor: a minimal Flask app that only parses the body and sorts the hosts by
the caller's weights. Served by the same gunicorn settings as Cortex in bench/latency.py."""

import json

from flask import Flask, Response, request

application = Flask("floor")


@application.post("/scheduler/<service>/external")
def external(service):
    """Parse, sort by weight, answer: the least any external scheduler must do."""
    body = json.loads(request.get_data())
    weights = body["weights"]
    hosts = sorted(dict.fromkeys(h["host"] for h in body["hosts"]), key=lambda h: -weights[h])
    return Response(json.dumps({"hosts": hosts}), mimetype="application/json")


@application.get("/healthcheck")
def healthcheck():
    """Ready."""
    return "OK"
