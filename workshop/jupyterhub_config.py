# JupyterHub for a workshop room on one GPU server: `jupyterhub -f workshop/jupyterhub_config.py`.
#
# Run it as root from the course's environment (the one `make workshop` built, hub included: the hub, the learners'
# servers and their kernels all use this Python, so every learner has the course's toolkit and pins).
# Each learner is a system user (PAM login; created on first login when FEEDBEAST_HUB_CREATE_USERS=1) and
# gets, before the first start of their server:
#   - ~/feedbeast: their own copy of the course (chapters, labs, solutions, toolkit source, Makefile),
#     owned by them, mode 0700, so no other learner can read or change it; `make grade LAB=04` and
#     `make reset-labs LAB=04` work in it as typed (FEEDBEAST_ENV=current: this Python, nothing installed);
#   - a GPU share: CUDA_VISIBLE_DEVICES set to one GPU index or one MIG instance, the least used one,
#     at most FEEDBEAST_HUB_PER_GPU learners on each (remembered in feedbeast-gpus.json beside the hub's
#     database, so a learner keeps their device across restarts); a stopped server gives its share back;
#   - the course kernel "Feeding the Beast" (kernelspec name feedbeast), this Python.
#
# Settings (environment variables, all optional):
#   FEEDBEAST_HUB_URL       where the hub listens (default http://:8000; behind TLS, put a proxy in front)
#   FEEDBEAST_HUB_COURSE    the course checkout copied to learners (default: the one holding this file)
#   FEEDBEAST_HUB_GPUS      devices to share out: "0,1" or "MIG-<uuid>,MIG-<uuid>" (default: what nvidia-smi -L
#                           lists, MIG instances first; none: learners run in the course's CPU mode)
#   FEEDBEAST_HUB_PER_GPU   learners per device (default 6; docs/instructors.md says how to measure the memory each takes)
#   FEEDBEAST_HUB_LEARNERS  a file with one allowed username per line, `#` starting a comment (default: every PAM
#                           user may log in)
#   FEEDBEAST_HUB_ADMINS    comma-separated instructor usernames (hub admins: start, stop, reset servers)
#   FEEDBEAST_HUB_SPAWNER   localprocess (default) or systemd (jupyterhub-systemdspawner: memory and CPU
#                           limits per learner through cgroups)
#   FEEDBEAST_HUB_MEM       memory limit per learner with the systemd spawner (default 8G)
#   FEEDBEAST_HUB_CREATE_USERS=1   create missing system users on first login (useradd)
#   FEEDBEAST_HUB_STATE     the folder of the hub's own files: the kernelspec it hands the learners' servers
#                           (share/jupyter) and the GPU shares (feedbeast-gpus*.json) (default: where the hub runs)
import json
import os
import pwd
import shutil
import sys
from pathlib import Path

from feedbeast.course import kernelspec   # the kernel "Feeding the Beast", as make install writes it
from feedbeast.course.gpu_devices import ENV as GPU_ENV, listed, problem, split, unchecked

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

HERE = Path(__file__).resolve().parent
COURSE = Path(os.environ.get("FEEDBEAST_HUB_COURSE", HERE.parent)).resolve()


def per_gpu(text: str) -> int:
    """FEEDBEAST_HUB_PER_GPU as a count of learners; a wrong value stops the hub with what it should hold."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise SystemExit(f"FEEDBEAST_HUB_PER_GPU={text!r}: it holds the number of learners per GPU (or MIG instance), "
                         "a whole number from 1 (default 6; 1 with MIG)")
    return n


PER_GPU = per_gpu(os.environ.get("FEEDBEAST_HUB_PER_GPU", "6"))
# What a learner's copy leaves out. Anywhere: history, environments, bundles, build outputs, caches, the hub's
# secrets. At the checkout's top: hidden files and folders other than the course's own (tools' state, caches, a
# .env), the hub's state when it was started there (feedbeast-gpus.json, share/), and the roster's grade files
# (*.csv, *.json: the course keeps none there). In labs/: backup/, where make reset-labs keeps edited labs.
SKIP_ANYWHERE = shutil.ignore_patterns(".git", ".venv", "venv", "wheelhouse", "wheelhouse.*", "build", "_book",
                                       "node_modules", "__pycache__", "*.pyc", ".ipynb_checkpoints", ".pytest_cache",
                                       ".cache", "*.egg-info", "jupyterhub.sqlite", "jupyterhub_cookie_secret",
                                       "jupyterhub-proxy.pid")
SKIP_AT_TOP = shutil.ignore_patterns("share", "*.csv", "*.json")
KEEP_HIDDEN = {".ci", ".github", ".gitignore", ".gitattributes"}


def skip(folder, names):
    """copytree's ignore for a learner's copy of COURSE (see SKIP_ANYWHERE)."""
    out = set(SKIP_ANYWHERE(folder, names))
    here = Path(folder)
    if here == COURSE:
        out |= set(SKIP_AT_TOP(folder, names))
        out |= {n for n in names if n.startswith(".") and n not in KEEP_HIDDEN}
    elif here == COURSE / "labs":
        out |= {"backup"} & set(names)
    return out

# ---- the hub ----------------------------------------------------------------------------------------------
c.JupyterHub.bind_url = os.environ.get("FEEDBEAST_HUB_URL", "http://:8000")


def proxy_command() -> list[str]:
    """The proxy JupyterHub starts: configurable-http-proxy, a Node.js program that make workshop puts in
    workshop/node_modules. Found on PATH or there (FEEDBEAST_HUB_PROXY names another), with node on PATH, or the hub
    stops here saying what to install, not later with the proxy's exit code and a traceback."""
    given = os.environ.get("FEEDBEAST_HUB_PROXY")
    local = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
    found = given or shutil.which("configurable-http-proxy") or (str(local) if local.exists() else None)
    if given and not (os.path.isfile(given) and os.access(given, os.X_OK)):
        raise SystemExit(f"FEEDBEAST_HUB_PROXY={given}: no program there; it names configurable-http-proxy's path")
    if found is None:
        raise SystemExit(f"feedbeast hub: configurable-http-proxy is neither on PATH nor in {local.parent}: run make "
                         "workshop in the course checkout (make workshop WHEELS=wheelhouse offline), which installs "
                         "it there, or set FEEDBEAST_HUB_PROXY to its path")
    if not given and shutil.which("node") is None:
        raise SystemExit("feedbeast hub: the proxy (configurable-http-proxy) runs on Node.js and no node is on PATH: "
                         "install Node.js 20 or newer (docs/instructors.md, The workshop hub offline, says how without "
                         "internet) and start the hub again")
    return [found]


c.ConfigurableHTTPProxy.command = proxy_command()
c.JupyterHub.cleanup_servers = True        # stopping the hub stops the learners' servers
c.JupyterHub.authenticator_class = "pam"
if os.environ.get("FEEDBEAST_HUB_CREATE_USERS") == "1":
    c.LocalAuthenticator.create_system_users = True


def allowed(path: str) -> set[str]:
    """FEEDBEAST_HUB_LEARNERS's usernames: one a line, blank lines and `# comments` (whole or trailing) left out."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SystemExit(f"FEEDBEAST_HUB_LEARNERS={path}: {e.strerror}: it names a file with one allowed username "
                         "per line; unset it to let every system user log in") from None
    names = {name for ln in text.splitlines() if (name := ln.split("#", 1)[0].strip())}
    if not names:
        raise SystemExit(f"FEEDBEAST_HUB_LEARNERS={path} names no user, so no learner could log in: write one "
                         "username per line, or unset it to let every system user log in")
    return names


_learners: set[str] = set()
if os.environ.get("FEEDBEAST_HUB_LEARNERS"):
    c.Authenticator.allowed_users = _learners = allowed(os.environ["FEEDBEAST_HUB_LEARNERS"])
else:
    c.Authenticator.allow_all = True
c.Authenticator.admin_users = {u.strip() for u in os.environ.get("FEEDBEAST_HUB_ADMINS", "").split(",") if u.strip()}

# PAM logs in system users only, and the hub looks its admins up at start: an admin with no account would stop it
# with a KeyError from deep inside JupyterHub. Said here, with what to do, unless users are created on first login.
def _no_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        return True


# A learner of FEEDBEAST_HUB_LEARNERS with no account cannot log in, and JupyterHub prints a traceback for each at
# start: one line first says who and what to do (not fatal: the rest of the room can start).
_no_login = sorted(u for u in _learners if _no_account(u.lower()))   # (an unset trait reads as a LazyConfigValue)
if _no_login and os.environ.get("FEEDBEAST_HUB_CREATE_USERS") != "1":
    print(f"FEEDBEAST_HUB_LEARNERS names {', '.join(_no_login)}, with no account on this server: they cannot log in "
          f"(PAM logs in system users), and JupyterHub reports each below as 'does not exist on the system'. Create the "
          f"accounts (sudo adduser {_no_login[0]}) and restart the hub, or set FEEDBEAST_HUB_CREATE_USERS=1 to create "
          "them on first login.", file=sys.stderr)

_missing = sorted(u for u in c.Authenticator.admin_users if _no_account(u.lower()))   # JupyterHub lowercases names
if _missing and os.environ.get("FEEDBEAST_HUB_CREATE_USERS") != "1":
    raise SystemExit(f"FEEDBEAST_HUB_ADMINS names {', '.join(_missing)}, with no account on this server: the hub logs "
                     f"in system users (PAM). Create the account (sudo adduser {_missing[0]}), name an existing user, "
                     "or set FEEDBEAST_HUB_CREATE_USERS=1 to create accounts on first login.")

# ---- the learners' servers ----------------------------------------------------------------------------------
if os.environ.get("FEEDBEAST_HUB_SPAWNER", "localprocess") == "systemd":
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
    c.SystemdSpawner.mem_limit = os.environ.get("FEEDBEAST_HUB_MEM", "8G")
    c.SystemdSpawner.isolate_tmp = True
    c.SystemdSpawner.isolate_devices = False   # the learner needs /dev/nvidia*
    c.SystemdSpawner.unit_name_template = "feedbeast-{USERNAME}"
else:
    c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]   # the course's Python, not whatever is on PATH
c.Spawner.notebook_dir = "~/feedbeast"
c.Spawner.default_url = "/lab/tree/labs"
# a new notebook: the course's kernel; the extension manager asks no package index (a workshop room may have none)
c.Spawner.args = ["--MappingKernelManager.default_kernel_name=feedbeast", "--LabApp.extension_manager=readonly"]
c.Spawner.http_timeout = 60
c.Spawner.start_timeout = 120

# The course kernel, defined once for every learner (no write into anyone's home or the environment).
KERNELS = Path(os.environ.get("FEEDBEAST_HUB_STATE", Path.cwd())).resolve() / "share" / "jupyter"
kernelspec.write(KERNELS / "kernels" / kernelspec.NAME)   # the course's hooks and %%cuda in every learner kernel
os.chmod(KERNELS, 0o755)


def gpu_devices():
    """The devices to share out: FEEDBEAST_HUB_GPUS, else what nvidia-smi -L lists (gpu_devices.listed)."""
    given = os.environ.get("FEEDBEAST_HUB_GPUS")
    return split(given) if given is not None else listed()


def say_shares():
    """Before the first login: a device CUDA cannot match stops the hub (each learner given it would see no GPU,
    or the wrong one); the shares, or the CPU mode, are said once."""
    devices = gpu_devices()
    if devices and (why := problem(devices, "FEEDBEAST_HUB_GPUS")):
        raise SystemExit(why)
    if devices and (note := unchecked(devices, "FEEDBEAST_HUB_GPUS")):
        print(f"feedbeast hub: note: {note}", file=sys.stderr)
    if devices:
        print(f"feedbeast hub: GPU shares: {', '.join(devices)}, {PER_GPU} learners on each ({len(devices) * PER_GPU} "
              "servers at once)", file=sys.stderr)
    else:
        print("feedbeast hub: no GPU to share out (FEEDBEAST_HUB_GPUS is empty, or nvidia-smi -L lists none): every "
              "learner runs in the course's CPU mode, where launches are skipped", file=sys.stderr)


say_shares()


STATE = Path(os.environ.get("FEEDBEAST_HUB_STATE", Path.cwd())).resolve()
ASSIGNMENTS = STATE / "feedbeast-gpus.json"          # the shares held now: {learner: device}, servers started
LAST = STATE / "feedbeast-gpus-last.json"            # the device of each learner whose server stopped


def _table(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, table: dict):
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def assign_gpu(user: str):
    """This learner's device: the one they hold; else the one they had last, if it has room; else the least used
    one with room; None when there is no device. A stopped server gives its share back (release_gpu)."""
    devices = gpu_devices()
    if not devices:
        return None
    table = _table(ASSIGNMENTS)
    if table.get(user) in devices:
        return table[user]
    load = {d: sum(1 for u, v in table.items() if v == d and u != user) for d in devices}
    free = [d for d in devices if load[d] < PER_GPU]
    if not free:
        raise RuntimeError(f"every GPU share is taken ({len(devices)} devices x {PER_GPU} learners): raise "
                           "FEEDBEAST_HUB_PER_GPU or stop a server (docs/instructors.md, 'during the day')")
    last = _table(LAST).get(user)
    table[user] = last if last in free else min(free, key=lambda d: (load[d], devices.index(d)))
    _save(ASSIGNMENTS, table)
    return table[user]


def release_gpu(user: str):
    """A learner's server stopped: their share is free for another learner, their device remembered for their
    next start."""
    table = _table(ASSIGNMENTS)
    if user in table:
        last = _table(LAST)
        last[user] = table.pop(user)
        _save(LAST, last)
        _save(ASSIGNMENTS, table)


def home_of(spawner) -> Path:
    """The learner's home: the spawner's own idea of it where it has one, else the system user's."""
    home = getattr(spawner, "home_dir", None)
    return Path(home) if home else Path(pwd.getpwnam(spawner.user.name).pw_dir)


def copy_course(home: Path, owner=None, new_accounts: bool = False) -> Path:
    """~/feedbeast: a copy of the course, made once (a restart keeps the learner's work), private. A home made
    here (a user without one) is the learner's too, mode 0700: made by root, it would lock them out of it. So is a
    home at the first start where the hub makes the accounts (new_accounts: adduser's mode may let others read
    it, the learner's IPython history among it). Another home that was there keeps its mode: the copy in it is
    0700 either way."""
    dest = home / "feedbeast"
    if not dest.exists():
        made = not home.exists()
        if made:
            home.mkdir(parents=True)
            if owner is not None:
                os.lchown(home, *owner)
        if owner is not None and (made or new_accounts):
            os.chmod(home, 0o700)
        # Homes kept inside the checkout (a trial hub's, say): none is copied, least of all the one being filled,
        # which copytree would enter again and again until the disk is full, nor another learner's work
        mine = home.resolve()

        def ignore(folder, names):      # this home, and each beside it that holds a learner's copy
            return skip(folder, names) | {n for n in names if (p := (Path(folder) / n).resolve()) == mine
                                          or (p.parent == mine.parent and (p / "feedbeast" / "labs").is_dir())}
        shutil.copytree(COURSE, dest, ignore=ignore, symlinks=True)
        if owner is not None:
            for root, dirs, files in os.walk(dest):
                for name in [root, *[os.path.join(root, n) for n in dirs + files]]:
                    os.lchown(name, *owner)
    os.chmod(dest, 0o700)
    return dest


def pre_spawn_hook(spawner):
    user = spawner.user.name
    owner = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam(user)
            owner = (pw.pw_uid, pw.pw_gid) if pw.pw_uid != 0 else None
        except KeyError:
            owner = None
    copy_course(home_of(spawner), owner, new_accounts=os.environ.get("FEEDBEAST_HUB_CREATE_USERS") == "1")
    # `make grade` and `make reset-labs` in ~/feedbeast use the course's Python and install nothing (there is no
    # .venv there, and the room may be offline): FEEDBEAST_ENV=current with PYTHON3, and that Python first on PATH.
    # (Not ENV=current: an interactive POSIX sh runs the file that $ENV names.)
    env = {"JUPYTER_PATH": str(KERNELS), "FEEDBEAST_COURSE": str(COURSE), "PYTHON3": sys.executable,
           "FEEDBEAST_ENV": "current", "FEEDBEAST_HOOKS": "feedbeast.course",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")}
    device = assign_gpu(user)
    # With no device a learner still compiles and checks SASS (the course's CPU mode); "" hides every GPU.
    env["CUDA_VISIBLE_DEVICES"] = device if device is not None else ""
    env.update(GPU_ENV)         # an index as nvidia-smi numbers the GPUs
    spawner.environment.update(env)
    spawner.log.info("feedbeast: %s gets CUDA_VISIBLE_DEVICES=%r", user, env["CUDA_VISIBLE_DEVICES"])


c.Spawner.pre_spawn_hook = pre_spawn_hook


def post_stop_hook(spawner):
    release_gpu(spawner.user.name)


c.Spawner.post_stop_hook = post_stop_hook
