"""The workshop hub's spawn hook without a hub: workshop/jupyterhub_config.py loaded with a stand-in for
JupyterHub's config object, its hook run on a stand-in spawner (tests/test_workshop.py runs the real hub).

What is checked: the course copy a learner gets leaves out what an instructor's checkout holds for the
instructor alone (edited labs in labs/backup, environments, bundles, build outputs, grade files, tools' state),
and the environment of the learner's server makes `make grade LAB=04` use the course's Python and install
nothing (FEEDBEAST_ENV=current), which the Makefile is asked about with `make -n`.
"""
from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from feedbeast.course import gpu_devices

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "workshop" / "jupyterhub_config.py"


class _Section(dict):
    """c.JupyterHub.bind_url = ...: any section, any attribute (what the config sets is not read here)."""

    def __getattr__(self, name):
        return self.setdefault(name, _Section())

    def __setattr__(self, name, value):
        self[name] = value


@pytest.fixture(autouse=True)
def _a_proxy(tmp_path_factory, monkeypatch):
    """The config looks for the proxy at load: a stand-in program, so that these tests need no Node.js."""
    proxy = tmp_path_factory.mktemp("proxy") / "configurable-http-proxy"
    proxy.write_text("#!/bin/sh\n")
    proxy.chmod(0o755)
    monkeypatch.setenv("FEEDBEAST_HUB_PROXY", str(proxy))


def test_the_hub_stops_at_start_without_its_proxy_or_node_saying_what_to_install(tmp_path, monkeypatch):
    """Without configurable-http-proxy or node JupyterHub fails only after start, with the proxy's exit code 127 and
    a traceback: the config stops first, naming what is missing and the make target that installs it."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("FEEDBEAST_HUB_PROXY")
    local = CONFIG.parent / "node_modules" / ".bin" / "configurable-http-proxy"
    why = "runs on Node.js and no node is on PATH" if local.exists() else "neither on PATH nor in"
    with pytest.raises(SystemExit, match=why):
        runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: _Section()})
    monkeypatch.setenv("FEEDBEAST_HUB_PROXY", str(tmp_path / "nothing"))
    with pytest.raises(SystemExit, match="FEEDBEAST_HUB_PROXY=.*nothing: no program there"):
        runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: _Section()})
    fake = empty / "configurable-http-proxy"        # on PATH, with node: taken, whatever workshop/ holds
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    (empty / "node").write_text("#!/bin/sh\n")
    (empty / "node").chmod(0o755)
    monkeypatch.delenv("FEEDBEAST_HUB_PROXY")
    monkeypatch.setenv("FEEDBEAST_HUB_COURSE", str(_checkout(tmp_path)))
    monkeypatch.setenv("FEEDBEAST_HUB_STATE", str(tmp_path))
    monkeypatch.setenv("FEEDBEAST_HUB_GPUS", "")
    config = _Section()
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    assert config.ConfigurableHTTPProxy.command == [str(fake)]


def test_a_gpu_named_where_nvidia_smi_lists_none_is_said_not_checked(tmp_path, monkeypatch, capsys):
    """With no nvidia-smi nothing says FEEDBEAST_HUB_GPUS=7 exists: the hub starts (a container may lack
    nvidia-smi) but says the devices were not checked, rather than listing them as shares like checked ones."""
    monkeypatch.setattr(gpu_devices, "_listing", lambda: "")
    _load(monkeypatch, tmp_path, FEEDBEAST_HUB_GPUS="7")
    err = capsys.readouterr().err
    assert "note: FEEDBEAST_HUB_GPUS: 7 not checked: nvidia-smi -L lists no device here" in err, err
    monkeypatch.setattr(gpu_devices, "_listing", lambda: TWO_GPUS)
    _load(monkeypatch, tmp_path, FEEDBEAST_HUB_GPUS="1")
    assert "not checked" not in capsys.readouterr().err


def _checkout(tmp: Path) -> Path:
    """An instructor's checkout after a day of work: the course's files and what must stay with the instructor."""
    course = tmp / "course"
    files = {
        # the course: every learner gets these
        "Makefile": (ROOT / "Makefile").read_text(),
        "labs/04-mbarrier-ring.ipynb": "{}", "solutions/04-mbarrier-ring.ipynb": "{}",
        "chapters/04-mbarrier.ipynb": "{}", "src/feedbeast/__init__.py": "", "results/nvidia-h200/bench.jsonl": "{}\n",
        "book/book.json": "{}", "workshop/package.json": "{}", "jupyter/labconfig/page_config.json": "{}",
        ".ci/run": "make test\n", ".github/workflows/cpu.yml": "name: cpu\n", ".gitignore": ".venv/\n",
        # the instructor's: no learner gets these
        "labs/backup/04-mbarrier-ring.20261128-101500.ipynb": "{\"instructor\": 1}",
        ".venv/bin/python": "", ".git/HEAD": "ref: refs/heads/main\n", "build/lib/x.py": "", "_book/index.html": "",
        "wheelhouse/feedbeast-0.1.0-py3-none-any.whl": "", "wheelhouse.new/x.whl": "", "wheelhouse.full-cp312/x.whl": "",
        "wheelhouse.notebook/x.whl": "",
        "workshop/node_modules/.bin/configurable-http-proxy": "", "grades.csv": "username,lab 04\nada,100\n",
        "grades.json": "[]", "feedbeast-gpus.json": "{}", "jupyterhub.sqlite": "", "jupyterhub_cookie_secret": "s",
        ".env": "TOKEN=secret\n", ".pytest_cache/v/x": "", "src/feedbeast/__pycache__/x.pyc": "",
        "labs/.ipynb_checkpoints/04-mbarrier-ring-checkpoint.ipynb": "{}",
        "share/jupyter/kernels/feedbeast/kernel.json": "{}", "venv/bin/python": "", ".gitattributes": "* text=auto\n",
        "src/feedbeast.egg-info/PKG-INFO": "", ".cache/x": "", "src/.cache/y": "", "jupyterhub-proxy.pid": "1",
    }
    for rel, text in files.items():
        (course / rel).parent.mkdir(parents=True, exist_ok=True)
        (course / rel).write_text(text)
    return course


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The config module as JupyterHub loads it, on a made-up checkout, its state under tmp_path, no GPU."""
    course = _checkout(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FEEDBEAST_HUB_COURSE", str(course))
    monkeypatch.setenv("FEEDBEAST_HUB_STATE", str(state))
    monkeypatch.setenv("FEEDBEAST_HUB_GPUS", "")          # no device: the learner gets the CPU mode
    config = _Section()
    module = runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    module["_course"] = course
    return module


def test_an_admin_without_an_account_is_named_before_the_hub_starts(tmp_path, monkeypatch):
    import pwd
    monkeypatch.setenv("FEEDBEAST_HUB_COURSE", str(_checkout(tmp_path)))
    monkeypatch.setenv("FEEDBEAST_HUB_STATE", str(tmp_path))
    monkeypatch.setenv("FEEDBEAST_HUB_GPUS", "")
    me = pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.setenv("FEEDBEAST_HUB_ADMINS", f"{me}, fb-no-such-instructor")
    with pytest.raises(SystemExit, match="FEEDBEAST_HUB_ADMINS names fb-no-such-instructor, with no account"):
        runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: _Section()})
    monkeypatch.setenv("FEEDBEAST_HUB_CREATE_USERS", "1")          # created on first login: no complaint
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: _Section()})
    monkeypatch.delenv("FEEDBEAST_HUB_CREATE_USERS")
    monkeypatch.setenv("FEEDBEAST_HUB_ADMINS", me.upper())                # JupyterHub lowercases it first
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: _Section()})
    monkeypatch.setenv("FEEDBEAST_HUB_ADMINS", me)
    config = _Section()
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    assert config.Authenticator.admin_users == {me}


def _spawn(hub, home: Path) -> dict:
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name="fb-test-learner-no-such-user"),
                                    home_dir=str(home), environment={},
                                    log=types.SimpleNamespace(info=lambda *a: None))
    hub["pre_spawn_hook"](spawner)
    return spawner.environment


def test_a_learner_copy_leaves_out_what_is_the_instructors(hub, tmp_path):
    _spawn(hub, tmp_path / "home")
    copy = tmp_path / "home" / "feedbeast"
    got = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert got == sorted([".ci/run", ".gitattributes", ".github/workflows/cpu.yml", ".gitignore", "Makefile", "book/book.json",
                          "chapters/04-mbarrier.ipynb", "jupyter/labconfig/page_config.json",
                          "labs/04-mbarrier-ring.ipynb", "results/nvidia-h200/bench.jsonl",
                          "solutions/04-mbarrier-ring.ipynb", "src/feedbeast/__init__.py",
                          "workshop/package.json"]), got
    assert oct(copy.stat().st_mode & 0o777) == "0o700"


def test_homes_inside_the_checkout_are_not_copied_into_a_learners_copy(hub, tmp_path):
    """A trial hub with its homes in the checkout (course/trial/homes/<user>): the copy of the course being made
    there is not entered again (copytree recursed until the disk was full), and another learner's home is not
    copied; the rest of that folder is the course's."""
    course = hub["_course"]
    (course / "trial" / "homes" / "ann" / "feedbeast" / "labs").mkdir(parents=True)
    (course / "trial" / "homes" / "ann" / "feedbeast" / "labs" / "04-mbarrier-ring.ipynb").write_text("{\"ann\": 1}")
    (course / "trial" / "notes.md").write_text("a trial\n")
    _spawn(hub, course / "trial" / "homes" / "cal")
    copy = course / "trial" / "homes" / "cal" / "feedbeast"
    assert (copy / "labs" / "04-mbarrier-ring.ipynb").is_file() and (copy / "trial" / "notes.md").is_file()
    assert (copy / "trial" / "homes").is_dir() and not any((copy / "trial" / "homes").iterdir())
    # homes at the checkout's top: another learner's is left out, the course's folders are not
    (course / "ann" / "feedbeast" / "labs").mkdir(parents=True)
    _spawn(hub, course / "dan")
    copy = course / "dan" / "feedbeast"
    assert not (copy / "ann").exists() and not (copy / "dan").exists() and (copy / "labs").is_dir()


def test_backup_and_grade_files_are_left_out_only_where_the_instructor_has_them(hub, tmp_path):
    """A folder named backup elsewhere, or a CSV below the top (the course's test data), is the course's."""
    course = hub["_course"]
    (course / "tests" / "data").mkdir(parents=True)
    (course / "tests" / "data" / "ncu_raw.csv").write_text("a,b\n")
    (course / "src" / "feedbeast" / "backup").mkdir()
    (course / "src" / "feedbeast" / "backup" / "__init__.py").write_text("")
    _spawn(hub, tmp_path / "home")
    copy = tmp_path / "home" / "feedbeast"
    assert (copy / "tests/data/ncu_raw.csv").is_file() and (copy / "src/feedbeast/backup/__init__.py").is_file()
    assert not (copy / "labs" / "backup").exists() and not (copy / "grades.csv").exists()


def test_the_learners_server_uses_the_course_python_and_installs_nothing(hub, tmp_path):
    env = _spawn(hub, tmp_path / "home")
    assert env["FEEDBEAST_ENV"] == "current" and env["PYTHON3"] == sys.executable, env
    assert "ENV" not in env       # an interactive POSIX sh would run the file $ENV names
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_new_notebook_on_the_hub_starts_in_the_course_kernel(hub):
    """The kernel the spawn hook's JUPYTER_PATH offers is the default one, so a learner's new notebook has the
    course's hooks (recorded figures beside skips, FEEDBEAST_HAZARDS) without choosing a kernel; the extension
    manager is read-only (no package index asked from a room that may have none)."""
    args = hub["c"].Spawner.args
    assert args == ["--MappingKernelManager.default_kernel_name=feedbeast", "--LabApp.extension_manager=readonly"]
    values = (ROOT / "workshop/k8s/values.yaml").read_text()      # the same on Kubernetes (Zero to JupyterHub)
    assert f"cmd: [jupyterhub-singleuser, {', '.join(args)}]" in values


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_grade_and_reset_labs_in_the_copy_build_no_venv(hub, tmp_path):
    """What `make` would run in the learner's copy, with the server's environment (make -n runs nothing)."""
    env = _spawn(hub, tmp_path / "home")
    copy = tmp_path / "home" / "feedbeast"
    run_env = {"HOME": str(tmp_path / "home"), **env}
    for target, commands in (("grade", [f"{sys.executable} -m feedbeast.course.labs find solutions labs 04",
                                        f'{sys.executable} -m feedbeast grade "$@"']),
                             ("reset-labs", [f"{sys.executable} -m feedbeast.course.labs reset solutions labs 04"])):
        r = subprocess.run(["make", "-n", target, "LAB=04"], cwd=copy, env=run_env, capture_output=True,
                           text=True, timeout=60)
        out = r.stdout + r.stderr
        assert r.returncode == 0 and all(c in out for c in commands), out
        assert "-m venv" not in out and "pip install" not in out, out


def _dockerignored(rel: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `rel` (a path in the build context) out, as .dockerignore reads: each pattern from the
    context's root (`*` within one name, `**` any number of folders), the last pattern that matches deciding, `!`
    taking a path back; a folder left out takes what is below it along."""
    import re

    def regex(pattern: str) -> str:
        segs = pattern.split("/")
        return "^" + "".join("(?:[^/]+/)*" if seg == "**" else
                             "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in seg)
                             + ("/" if i < len(segs) - 1 else "") for i, seg in enumerate(segs)) + "$"

    parts, out = rel.split("/"), False
    for i in range(1, len(parts) + 1):       # the folders above first: what they decide holds below them
        prefix = "/".join(parts[:i])
        for p in patterns:
            if re.match(regex(p.lstrip("!")), prefix):
                out = not p.startswith("!")
        if out:
            return True
    return False


def test_the_learners_image_leaves_out_what_the_hub_copy_leaves_out(hub, tmp_path):
    """The k8s image (workshop/k8s/Dockerfile) copies the checkout as .dockerignore filters it: the same files as
    a learner's copy on the hub, on the same instructor's checkout."""
    course = hub["_course"]
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    image = sorted(str(p.relative_to(course)) for p in course.rglob("*")
                   if p.is_file() and not _dockerignored(str(p.relative_to(course)), patterns))
    _spawn(hub, tmp_path / "home")
    copy = tmp_path / "home" / "feedbeast"
    assert image == sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert "COPY . /opt/feedbeast/course" in (ROOT / "workshop/k8s/Dockerfile").read_text()


def test_a_server_that_mixes_mig_and_whole_gpus_shares_out_both():
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-1111)\n"
               "  MIG 3g.40gb     Device  1: (UUID: MIG-2222)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n"
               "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-cccc)\n")
    assert gpu_devices.devices_of(listing) == ["MIG-1111", "MIG-2222", "1", "2"]
    assert gpu_devices.devices_of("GPU 0: NVIDIA H200 (UUID: GPU-dddd)\n") == ["0"]


def test_the_kubernetes_learners_know_where_the_course_is():
    """The learner sheet copies from $FEEDBEAST_COURSE, and make grade takes the checks of the course there."""
    values = (ROOT / "workshop/k8s/values.yaml").read_text()
    assert "FEEDBEAST_COURSE: /opt/feedbeast/course" in values
    assert "COPY . /opt/feedbeast/course" in (ROOT / "workshop/k8s/Dockerfile").read_text()


def _load(monkeypatch, tmp_path, **env):
    """The config as the hub loads it, with these settings; its Authenticator section."""
    monkeypatch.setenv("FEEDBEAST_HUB_COURSE", str(_checkout(tmp_path)))
    monkeypatch.setenv("FEEDBEAST_HUB_STATE", str(tmp_path))
    monkeypatch.setenv("FEEDBEAST_HUB_GPUS", "")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    config = _Section()
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    return config.Authenticator


def test_the_learners_file_takes_names_not_comments(tmp_path, monkeypatch, capsys):
    import pwd
    names = tmp_path / "learners.txt"
    names.write_text("# the room, Tuesday\nalice  # TA\n  # bob is away\n\tcarol\t\n\n  dave\n")
    assert _load(monkeypatch, tmp_path, FEEDBEAST_HUB_LEARNERS=str(names)).allowed_users == {"alice", "carol", "dave"}
    # those with no account here are named once, before JupyterHub's traceback for each
    absent = sorted(n for n in ("alice", "carol", "dave") if not any(p.pw_name == n for p in pwd.getpwall()))
    err = capsys.readouterr().err
    assert (f"FEEDBEAST_HUB_LEARNERS names {', '.join(absent)}, with no account" in err) == bool(absent), err
    me = pwd.getpwuid(os.getuid()).pw_name
    names.write_text(f"{me}\n")
    _load(monkeypatch, tmp_path, FEEDBEAST_HUB_LEARNERS=str(names))
    assert "no account" not in capsys.readouterr().err
    names.write_text("# nobody yet\n")
    with pytest.raises(SystemExit, match="names no user, so no learner could log in"):
        _load(monkeypatch, tmp_path, FEEDBEAST_HUB_LEARNERS=str(names))


def test_a_wrong_setting_stops_the_hub_with_what_it_should_hold(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match=r"FEEDBEAST_HUB_LEARNERS=.*nowhere.txt: No such file.*one allowed username"):
        _load(monkeypatch, tmp_path, FEEDBEAST_HUB_LEARNERS=str(tmp_path / "nowhere.txt"))
    monkeypatch.delenv("FEEDBEAST_HUB_LEARNERS")
    for wrong in ("six", "2.5", "0"):
        with pytest.raises(SystemExit, match=f"FEEDBEAST_HUB_PER_GPU='{wrong}': it holds the number of learners"):
            _load(monkeypatch, tmp_path, FEEDBEAST_HUB_PER_GPU=wrong)
    _load(monkeypatch, tmp_path, FEEDBEAST_HUB_PER_GPU="2")


def test_a_home_the_hook_makes_belongs_to_the_learner(hub, tmp_path, monkeypatch):
    """A user with no home yet: the hook makes it and the copy in it, both the learner's (as root, the hook gives
    them away; made by root and 0700, the home would lock the learner out of their own server)."""
    import pwd
    learner = pwd.getpwnam("nobody")
    given = {}
    if os.geteuid() != 0:           # no root here: the hook as root, its chowns recorded instead of made
        glob = hub["pre_spawn_hook"].__globals__
        monkeypatch.setattr(glob["os"], "geteuid", lambda: 0)
        monkeypatch.setattr(glob["os"], "lchown", lambda p, u, g: given.__setitem__(os.fspath(p), (u, g)))
    home = tmp_path / "homes" / "nobody"
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name="nobody"), home_dir=str(home), environment={},
                                    log=types.SimpleNamespace(info=lambda *a: None))
    hub["pre_spawn_hook"](spawner)
    paths = [home, *home.rglob("*")]
    owners = {p: given.get(str(p)) or (os.lstat(p).st_uid, os.lstat(p).st_gid) for p in paths}
    assert len(paths) > 10 and all(o == (learner.pw_uid, learner.pw_gid) for o in owners.values()), \
        [str(p) for p, o in owners.items() if o != (learner.pw_uid, learner.pw_gid)]
    assert oct(home.stat().st_mode & 0o777) == "0o700"


def test_a_home_that_was_there_keeps_its_mode(hub, tmp_path, monkeypatch):
    """The hook made every learner's home 0700 at each start, homes it had not made too: only the copy in it is
    the course's to close (0700); a home the hook makes is 0700 and the learner's."""
    if os.geteuid() != 0:
        glob = hub["pre_spawn_hook"].__globals__
        monkeypatch.setattr(glob["os"], "geteuid", lambda: 0)
        monkeypatch.setattr(glob["os"], "lchown", lambda p, u, g: None)
    home = tmp_path / "homes" / "nobody"
    home.mkdir(parents=True)
    home.chmod(0o751)
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name="nobody"), home_dir=str(home), environment={},
                                    log=types.SimpleNamespace(info=lambda *a: None))
    for _ in range(2):          # the first start copies the course, the second finds it
        hub["pre_spawn_hook"](spawner)
        assert oct(home.stat().st_mode & 0o777) == "0o751"
        assert oct((home / "feedbeast").stat().st_mode & 0o777) == "0o700"
    # where the hub makes the accounts (adduser made this home, with its own mode), the first start closes it
    made = tmp_path / "homes" / "new"
    made.mkdir()
    made.chmod(0o755)
    monkeypatch.setenv("FEEDBEAST_HUB_CREATE_USERS", "1")
    hub["pre_spawn_hook"](types.SimpleNamespace(user=spawner.user, home_dir=str(made), environment={}, log=spawner.log))
    assert oct(made.stat().st_mode & 0o777) == "0o700"


TWO_GPUS = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n"


def test_the_hub_refuses_a_gpu_the_server_lacks_and_says_its_shares(tmp_path, monkeypatch, capsys):
    """A device in FEEDBEAST_HUB_GPUS that CUDA cannot match would leave each learner given it without a GPU (and
    hide the devices listed after it): the hub stops before the first login and says which. It says the shares it
    hands out, or that learners get the CPU mode."""
    monkeypatch.setattr(gpu_devices, "_listing", lambda: TWO_GPUS)
    for value, why in (("0,7", "FEEDBEAST_HUB_GPUS: 7 names no single device here; this server's are 0 (GPU-aaaa), 1 (GPU-bbbb)"),
                       ("GPU-cccc", "FEEDBEAST_HUB_GPUS: GPU-cccc names no single device here"),
                       ("cuda:1", "FEEDBEAST_HUB_GPUS: 'cuda:1' is not a GPU as CUDA_VISIBLE_DEVICES names one")):
        with pytest.raises(SystemExit, match=re.escape(why)):
            _load(monkeypatch, tmp_path, FEEDBEAST_HUB_GPUS=value)
    _load(monkeypatch, tmp_path, FEEDBEAST_HUB_GPUS="1,GPU-aaaa", FEEDBEAST_HUB_PER_GPU="3")
    assert "GPU shares: 1, GPU-aaaa, 3 learners on each (6 servers at once)" in capsys.readouterr().err
    _load(monkeypatch, tmp_path)
    assert "no GPU to share out (FEEDBEAST_HUB_GPUS is empty" in capsys.readouterr().err


def test_a_stopped_server_gives_its_gpu_share_back(tmp_path, monkeypatch):
    """Two devices, two learners each: a fifth learner is refused while four servers run, and gets the share of a
    learner whose server stopped (JupyterHub's post_stop_hook). The learner who stopped comes back to the device
    they had when it has room, to another when not."""
    monkeypatch.setenv("FEEDBEAST_HUB_COURSE", str(_checkout(tmp_path)))
    monkeypatch.setenv("FEEDBEAST_HUB_STATE", str(tmp_path))
    monkeypatch.setenv("FEEDBEAST_HUB_GPUS", "0,1")
    monkeypatch.setenv("FEEDBEAST_HUB_PER_GPU", "2")
    monkeypatch.setattr(gpu_devices, "_listing", lambda: TWO_GPUS)
    config = _Section()
    hub = runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    assert config.Spawner.post_stop_hook is hub["post_stop_hook"]
    assert [hub["assign_gpu"](u) for u in "abcd"] == ["0", "1", "0", "1"]
    assert hub["assign_gpu"]("a") == "0"                               # a share held is kept
    with pytest.raises(RuntimeError, match="every GPU share is taken .* or stop a server"):
        hub["assign_gpu"]("e")

    class Spawner:
        class user:
            name = "b"
    hub["post_stop_hook"](Spawner)
    assert hub["assign_gpu"]("e") == "1"                                # b's share
    assert json.loads((tmp_path / "feedbeast-gpus.json").read_text()) == {"a": "0", "c": "0", "d": "1", "e": "1"}
    Spawner.user.name = "a"
    hub["post_stop_hook"](Spawner)
    hub["post_stop_hook"](Spawner)                                      # stopped twice: nothing more to give
    assert hub["assign_gpu"]("a") == "0"                                # back to the device a had
    for name in "cd":
        Spawner.user.name = name
        hub["post_stop_hook"](Spawner)
    assert hub["assign_gpu"]("f") == "0"                                # c's share
    assert hub["assign_gpu"]("c") == "1"                                # c's device is full again: the other


def test_a_mig_instance_is_named_by_its_uuid_or_a_prefix_of_it_that_names_one(monkeypatch):
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-1111)\n"
               "  MIG 3g.40gb     Device  1: (UUID: MIG-1122)\n")
    monkeypatch.setattr(gpu_devices, "_listing", lambda: listing + "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n")
    assert gpu_devices.problem(["MIG-1111", "MIG-1122", "GPU-b"], "X") is None
    assert gpu_devices.problem(["1", "MIG-1122"], "X") is None
    assert gpu_devices.problem(["MIG-11"], "X") == (
        "X: MIG-11 names no single device here; this server's are 0 (GPU-aaaa), MIG-1111 (on GPU 0), MIG-1122 "
        "(on GPU 0), 1 (GPU-bbbb) (nvidia-smi -L): with a device CUDA cannot match, it hides that one and every "
        "device listed after it")                     # a MIG instance by its whole UUID: CUDA shortens a GPU's only
    for whole in ("0", "GPU-aa"):                     # a GPU in MIG mode runs work in its instances alone
        assert gpu_devices.problem([whole], "X") == (f"X: {whole} is a GPU in MIG mode, which runs work only in its "
                                                     "MIG instances: name those (MIG-1111, MIG-1122)")
    assert gpu_devices.problem(["MIG-1111", "MIG-1111"], "X") == "X: MIG-1111 and MIG-1111 are the same device: " \
        "name each device once"
    monkeypatch.setattr(gpu_devices, "_listing", lambda: "")
    assert gpu_devices.problem(["5"], "X") is None   # no nvidia-smi: nothing to compare with, CUDA will say
