"""The built wheel installs and upgrades a database outside the checkout."""

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile

import pytest

from cortex.db import migrate
from tests.conftest import REPO

pytestmark = pytest.mark.functional


def test_wheel_installs_and_migrates(tmp_path, empty_database_url):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                    "--outdir", str(dist), str(REPO)], check=True, capture_output=True)
    wheel = next(dist.glob("cortex_scheduler-*.whl"))
    with zipfile.ZipFile(wheel) as archive:  # the dashboard's files ship in the wheel
        shipped = set(archive.namelist())
    pages = {p.relative_to(REPO).as_posix() for folder in ("templates", "static")
             for p in (REPO / "cortex" / "dashboard" / folder).iterdir()}
    assert pages and pages <= shipped, pages - shipped
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    # Dependencies come from the test environment, not from the network: a .pth line
    # puts its site-packages after the new venv's own (nested .pth files, such as the
    # checkout's editable-install hook, are not processed, so the checkout stays out).
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "zz_test_deps.pth"), "w") as pth:
        pth.write(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "PYTHON"))}
    env["CORTEX_DATABASE_CONNECTION"] = empty_database_url
    where = subprocess.run([python, "-c", "import cortex, cortex_migrations; "
                            "print(cortex.__file__); print(cortex_migrations.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert all(line.startswith(str(target)) for line in where.stdout.split()), where.stdout
    upgrade = subprocess.run([target / "bin" / "cortex-manage", "db", "upgrade"],
                             capture_output=True, text=True, cwd=tmp_path, env=env)
    assert upgrade.returncode == 0, upgrade.stderr
    assert f"database at revision {migrate.head_revision()}" in upgrade.stdout
    check = subprocess.run([target / "bin" / "cortex-manage", "config", "check"],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stderr
    assert str(target) in check.stdout  # the pipelines.yaml installed with the wheel
    assert (target / "share" / "cortex" / "prometheus-queries.yaml").is_file()
    fleet = target / "share" / "cortex" / "demo-fleet.yaml"
    load = subprocess.run([target / "bin" / "cortex-manage", "load-fleet", str(fleet)],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert load.returncode == 0 and "58 hosts" in load.stdout, load.stderr
    dashboard = subprocess.run(
        [python, "-c", "from cortex import conf; from cortex.api.app import create_app; "
         "app = create_app(conf.load(overrides={'api.auth_strategy': 'noauth'})); "
         "r = app.test_client().get('/ui'); print(r.status_code, '<h1>Fleet</h1>' in r.text); "
         "app.extensions['cortex'].decisions.close()"],
        capture_output=True, text=True, cwd=tmp_path, env=env)
    assert dashboard.stdout.split() == ["200", "True"], dashboard.stderr[-2000:]
