"""The cortex-agent command: printing, and reporting over real HTTP."""

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from werkzeug.serving import make_server

from cortex import conf
from cortex.agent import cli
from cortex.api.app import create_app
from tests.topology_fakes import FakeNvml, load_layout, write_tree


@pytest.fixture
def tree(tmp_path):
    layout = load_layout("hgx-h100-8gpu")
    write_tree(tmp_path, layout)
    return tmp_path, FakeNvml(layout)


def args(root, *extra):
    return ["--host", "cmp-agent-test", "--sysfs-root", str(root), "--proc-root",
            str(root / "proc"), "--nova-config", str(root / "etc/nova/nova.conf"), *extra]


def test_once_print_writes_the_report(tree):
    root, nvml = tree
    out = io.StringIO()
    assert cli.main(args(root, "--once", "--print"), nvml=nvml, out=out) == 0
    report = json.loads(out.getvalue())
    assert report["host"] == "cmp-agent-test" and len(report["gpus"]) == 8
    assert report["numa_cells"][0]["dedicated_cpus"] == "6-55,118-167"


def test_nothing_to_do_is_a_usage_error(tree):
    with pytest.raises(SystemExit) as info:
        cli.main(args(tree[0], "--once"))
    assert info.value.code == 2


class Recorder(BaseHTTPRequestHandler):
    """Answers like the API and remembers what it got."""

    seen: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.seen.append((self.path, dict(self.headers), json.loads(body)))
        answer = {"host": "x"} if Recorder.status == 200 else {
            "errors": [{"status": 400, "title": "Bad Request", "detail": "bad cells",
                        "request_id": "req-1"}]}
        self.send_response(Recorder.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(answer).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.seen, Recorder.status = [], 200
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_report_posts_with_the_token_from_a_file(tree, recorder, tmp_path_factory):
    root, nvml = tree
    token = tmp_path_factory.mktemp("secret") / "token"
    token.write_text("s3cret\n")
    assert cli.main(args(root, "--once", "--report", recorder + "/", "--token-file",
                         str(token)), nvml=nvml) == 0
    [(path, headers, body)] = Recorder.seen
    assert path == "/v1/topology/cmp-agent-test"
    assert headers["X-Auth-Token"] == "s3cret" and headers["Content-Type"] == "application/json"
    assert len(body["gpus"]) == 8


def test_report_failure_is_exit_1_with_the_api_detail(tree, recorder, caplog, monkeypatch):
    monkeypatch.setenv(cli.TOKEN_ENV, "from-env")
    Recorder.status = 400
    assert cli.main(args(tree[0], "--once", "--report", recorder), nvml=tree[1]) == 1
    assert "HTTP 400: bad cells" in caplog.text
    assert Recorder.seen[0][1]["X-Auth-Token"] == "from-env"


def test_unreachable_api_is_exit_1(tree, caplog):
    assert cli.main(args(tree[0], "--once", "--report", "http://127.0.0.1:1"),
                    nvml=tree[1]) == 1
    assert "report failed" in caplog.text


def test_periodic_reports_until_stopped(tree, recorder):
    stop = threading.Event()

    class Counting(FakeNvml):
        def nvmlInit(self):  # noqa: N802
            super().nvmlInit()
            if len(Recorder.seen) >= 1:
                stop.set()

    nvml = Counting(load_layout("hgx-h100-8gpu"))
    assert cli.main(args(tree[0], "--report", recorder, "--interval", "0.01"), nvml=nvml,
                    stop=stop) == 0
    assert len(Recorder.seen) == 2


def test_no_token_sends_no_header(monkeypatch):
    monkeypatch.delenv(cli.TOKEN_ENV, raising=False)
    assert cli.read_token(None) is None
    assert cli.read_token(None, {cli.TOKEN_ENV: "t"}) == "t"


def test_agent_reports_into_a_real_api_server(tree, engine, database_url, tmp_path):
    """The agent posts over HTTP to the real app with its token; the API stores it."""
    root, nvml = tree
    app = create_app(conf.load(environ={}, overrides={
        "database.connection": database_url, "api.auth_strategy": "static",
        "api.static_tokens": "cmp-agent-test:agent:agent-token, ops:reader:read-token"}),
        engine=engine)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token_file = tmp_path / "token"
    token_file.write_text("agent-token\n")
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        assert cli.main(args(root, "--once", "--report", url), nvml=nvml) == 1  # no token
        assert cli.main(args(root, "--once", "--report", url, "--token-file", str(token_file)),
                        nvml=nvml) == 0
        client = app.test_client()
        assert client.get("/v1/topology/cmp-agent-test",
                          headers={"X-Auth-Token": "agent-token"}).status_code == 403
        stored = client.get("/v1/topology/cmp-agent-test",
                            headers={"X-Auth-Token": "read-token"}).get_json()
        assert stored["host"] == "cmp-agent-test" and len(stored["gpu_links"]) == 28
        assert stored["reported_at"]
    finally:
        server.shutdown()
        app.extensions["cortex"].decisions.close()
