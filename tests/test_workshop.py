"""The workshop hub on loopback: workshop/jupyterhub_config.py with a dummy login and local processes.

JupyterHub (pip, requirements/hub.txt) with configurable-http-proxy (workshop/node_modules, put there by
`make workshop` before the tests, or on PATH), everything on 127.0.0.1, torn down at the end. Three learners are created through the hub's REST
API and their servers spawned (the config's spawn hook copies the course into each home and hands out GPU
shares); lab 00 runs in one learner's server through the kernel API, in the course kernel; the learners
save their lab 00 through the contents API (one leaves it as given, one solves it, one breaks it); the
roster grades all three. Skipped by name where Node, the proxy or JupyterHub is absent: the test installs and
downloads nothing.
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from feedbeast.course import notebook

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "workshop" / "jupyterhub_config.py"
LEARNERS = ["ada", "bob", "cyd"]          # untouched, solved, broken
PHASES: dict = {}


def _proxy() -> str | None:
    local = ROOT / "workshop" / "node_modules" / ".bin" / "configurable-http-proxy"
    return shutil.which("configurable-http-proxy") or (str(local) if local.exists() else None)


def _why_not() -> str | None:
    if shutil.which("node") is None:
        return "Node.js is not installed (configurable-http-proxy needs it)"
    if _proxy() is None:
        return "configurable-http-proxy is not installed: make workshop (offline: make workshop WHEELS=wheelhouse)"
    try:
        import jupyterhub  # noqa: F401
        import jupyter_server  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed: make workshop"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=f"workshop hub: {_why_not()}")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hub:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def api(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        return json.loads(text) if text.strip() else None

    def wait_ready(self, user: str, limit: float = 40):
        t = time.time()
        while time.time() - t < limit:
            server = (self.api("GET", f"/hub/api/users/{user}").get("servers") or {}).get("")
            if server and server.get("ready"):
                return server
            time.sleep(0.3)
        raise TimeoutError(f"{user}'s server did not become ready in {limit} s")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    homes, state = tmp / "homes", tmp / "state"
    homes.mkdir()
    state.mkdir()
    token = uuid.uuid4().hex
    port, hub_port, api_port = _port(), _port(), _port()
    (state / "test_config.py").write_text(f"""
c = get_config()
load_subconfig({str(CONFIG)!r})
# Loopback test: a dummy login and the learners' servers as local processes of this user.
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(homes)!r} + "/{{username}}"
c.Spawner.args = ["--ServerApp.ip=127.0.0.1",   # what the test does not use is not loaded (start time)
                  '--ServerApp.jpserver_extensions={{"jupyter_lsp": False, "jupyter_server_terminals": False}}'] \
    + (["--allow-root"] if {os.geteuid() == 0} else [])
c.LocalProcessSpawner.interrupt_timeout = 2      # the teardown: stop the servers without waiting 10 s each
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{_proxy()!r}]
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0, "slow_stop_timeout": 0}}   # answer at once
c.JupyterHub.db_url = "sqlite:///" + {str(state / "hub.sqlite")!r}
c.JupyterHub.cookie_secret_file = {str(state / "cookie_secret")!r}
c.JupyterHub.services = [{{"name": "instructor", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "instructor", "services": ["instructor"],
                            "scopes": ["admin:users", "admin:servers", "access:servers"]}}]
""")
    env = dict(os.environ, FEEDBEAST_HUB_GPUS="0,1", FEEDBEAST_HUB_PER_GPU="2",
               FEEDBEAST_HUB_STATE=str(state))
    log = open(state / "hub.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(state / "test_config.py")],
                            cwd=state, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    h = Hub(f"http://127.0.0.1:{port}", token)
    h.homes, h.state, h.proc = homes, state, proc
    try:
        t = time.time()
        while True:
            try:
                h.api("GET", "/hub/api/")
                break
            except OSError:
                if proc.poll() is not None or time.time() - t > 30:
                    raise RuntimeError("the hub did not start:\n" + (state / "hub.log").read_text()[-3000:])
                time.sleep(0.3)
        yield h
    finally:
        proc.send_signal(signal.SIGTERM)            # the hub stops the learners' servers and the proxy
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _execute(hub: Hub, user: str, kernel_id: str, code: str, limit: float = 60) -> tuple[str, dict | None]:
    """Run `code` in a kernel of `user`'s server over the kernel websocket; (stdout text, error or None)."""
    import tornado.httpclient
    import tornado.ioloop
    import tornado.websocket

    async def run():
        url = hub.url.replace("http://", "ws://") + f"/user/{user}/api/kernels/{kernel_id}/channels"
        req = tornado.httpclient.HTTPRequest(url, headers={"Authorization": f"token {hub.token}"})
        ws = await tornado.websocket.websocket_connect(req)
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": user, "session": uuid.uuid4().hex, "msg_type": "execute_request",
                       "version": "5.3", "date": datetime.datetime.now(datetime.timezone.utc).isoformat()},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out, error, t = [], None, time.time()
        while time.time() - t < limit:
            raw = await ws.read_message()
            if raw is None:
                break
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                error = msg["content"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
        ws.close()
        return "".join(out), error
    return tornado.ioloop.IOLoop.current().run_sync(run, timeout=limit + 5)


def _save(hub: Hub, user: str, path: str, nb) -> None:
    hub.api("PUT", f"/user/{user}/api/contents/{path}", {"type": "notebook", "format": "json", "content": nb})


def test_three_learners_one_lab_run_in_a_server_and_the_roster(hub, tmp_path):
    t0 = time.time()
    hub.api("POST", "/hub/api/users", {"usernames": LEARNERS})
    for user in LEARNERS:
        hub.api("POST", f"/hub/api/users/{user}/server")
    for user in LEARNERS:
        hub.wait_ready(user)
        copy = hub.homes / user / "feedbeast"
        assert (copy / "labs" / "00-copy-kernel.ipynb").is_file() and (copy / "Makefile").is_file()
        assert not (copy / ".git").exists() and oct((copy.stat().st_mode) & 0o777) == "0o700"
    PHASES['spawned'] = round(time.time() - t0, 1)
    shares = json.loads((hub.state / "feedbeast-gpus.json").read_text())
    assert shares == {"ada": "0", "bob": "1", "cyd": "0"}, shares     # least used first, 2 per device

    # bob works in his server: the course kernel, his own lab 00 (solved), run cell by cell.
    sol = notebook.planted(ROOT / "solutions/00-copy-kernel.ipynb")   # an unchanged copy: his solved lab
    _save(hub, "bob", "labs/00-copy-kernel.ipynb", sol)
    specs = hub.api("GET", "/user/bob/api/kernelspecs")["kernelspecs"]
    assert "feedbeast" in specs, sorted(specs)
    kernel = hub.api("POST", "/user/bob/api/kernels", {"name": "feedbeast", "path": "labs"})
    env, err = _execute(hub, "bob", kernel["id"], "import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], os.getcwd(), "
                                                  "os.environ.get('FEEDBEAST_HOOKS'), os.environ.get('FEEDBEAST_ENV'))")
    assert err is None and env.split()[0] == "1" and env.split()[1].endswith("bob/feedbeast/labs"), (env, err)
    assert env.split()[2] == "feedbeast.course", env      # the course's hooks: %env FEEDBEAST_HAZARDS=1 works
    assert env.split()[3] == "current", env               # make grade in a terminal: this Python, no .venv built
    seen = ""
    for cell in sol.cells:
        if cell.cell_type != "code" or cell.source.startswith("ceiling"):   # Measure: not here
            continue
        out, err = _execute(hub, "bob", kernel["id"], cell.source)
        assert err is None, f"{cell.source[:60]}: {err}"
        seen += out
    assert "compiled for sm_" in seen and "copy_x2" in seen and "LDG.E.128" in seen, seen
    PHASES['lab00 in server'] = round(time.time() - t0, 1)
    hub.api("DELETE", f"/user/bob/api/kernels/{kernel['id']}")

    # cyd breaks hers (a typo the compiler rejects); ada leaves hers as given.
    broken = notebook.planted(ROOT / "solutions/00-copy-kernel.ipynb", [("d4[i] = a;", "d4[i] = a_typo;")],
                              cuda_only=True)
    _save(hub, "cyd", "labs/00-copy-kernel.ipynb", broken)

    out_csv, out_json = tmp_path / "grades.csv", tmp_path / "grades.json"
    r = subprocess.run([sys.executable, "-m", "feedbeast", "roster", "--homes", str(hub.homes), "--labs", "00",
                        "--jobs", "3", "--csv", str(out_csv), "--json", str(out_json)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    PHASES['roster'] = round(time.time() - t0, 1)
    rows = {row["username"]: row for row in csv.DictReader(out_csv.open())}
    docs = {d["learner"]: d for d in json.loads(out_json.read_text())}
    from feedbeast.course.grade import _has_gpu
    solved = "ok" if _has_gpu() else "partial"
    # ada's lab is the lab as given: not started, where cyd's broken one failed
    assert {u: rows[u]["lab 00 status"] for u in LEARNERS} == {"ada": "not started", "bob": solved, "cyd": "failed"}, rows
    assert float(rows["bob"]["lab 00"]) > 0 and float(rows["ada"]["lab 00"]) == 0.0, rows
    assert docs["ada"]["labs"][0]["status"] == "failed" and docs["ada"]["labs"][0]["untouched"], docs["ada"]
    assert rows["ada"]["first failing check"] == "lab 00: not started (its code is the lab's as given)", rows
    ada = "\n".join(c["message"] for c in docs["ada"]["labs"][0]["checks"] if c["status"] == "failed")
    cyd = "\n".join(c["message"] for c in docs["cyd"]["labs"][0]["checks"] if c["status"] == "failed")
    assert "LDG.E.128" in ada, ada                      # as given: the SASS check names the missing loads
    assert "CompileError" in cyd and "a_typo" in cyd, cyd
    print(f"hub test body {time.time() - t0:.1f} s; phases {PHASES}")
