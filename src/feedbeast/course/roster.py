"""Grade every learner's labs on a workshop server and write one CSV an LMS can import.

    sudo python -m feedbeast roster --homes /home --csv grades.csv            # all labs found
    sudo python -m feedbeast roster --homes /home --labs 00 03 --csv grades.csv --json grades.json

A learner is a folder under --homes that holds a course copy (`<home>/<subdir>`, default `feedbeast/labs`,
which is where the workshop's spawn hook puts it). For each learner, in turn:

1. their lab notebooks (NN-*.ipynb; regular files only: a symbolic link, say to another learner's lab, is refused)
   are copied into a fresh private folder; the learner's own files are only read. Another notebook there
   (Untitled.ipynb, or 12-my-notes.ipynb when the course's solutions/ have no lab 12) is no lab of the course: not
   graded, no column, named in the learner's row;
2. `python -m feedbeast grade --json` grades the copies in a fresh process, with the checks of the
   course's solutions (the instructor's checkout, never the learner's copy of solutions/). Run as root,
   that process runs as the learner (the owner of their labs folder, `<home>/<subdir>`): their code can then
   touch nothing that they could not touch anyway, in particular no other learner's files or grade;
3. the JSON comes back on the process's standard output.

CSV: one row per learner; for each lab a score (see score(): for a failed lab the mean over its check cells of
100 x passed / (passed + failed), leaving out what the lab as given passes on this machine (graded once per run),
a cell cut short scoring 0, below 100 for every failed lab; empty when no check ran) and a status (ok, partial,
failed; not started: nothing of the learner's is written yet, scored 0; missing: no such notebook, nothing handed
in; error: the learner or the notebook could not be graded, e.g. the grader could not start as them, the notebook
cannot be read, the lab handed in was refused (two notebooks, neither named as the course names it; a link), or
this account cannot read the learner's folder). Columns: username, "lab NN",
"lab NN status", ..., "labs ok", "first failing check" (the first lab, in order, with a failed check:
"lab 04: name: why"; for an error row, why it could not be graded).
Exit status: 0 when every learner was graded (whatever their grades), 1 otherwise (an error row: a lab handed in
and not graded, a learner whose folder this account cannot read); 2 when nothing was graded because the command
line names something that is not there (--homes, a learner of --only, a lab of --labs, the folder of --csv or
--json), no folder under --homes holds --subdir (the --subdir they hold is suggested), the course found lies under
--homes (a learner's copy: --solutions or FEEDBEAST_COURSE names the instructor's), or this account can read no
learner's folder (run as root).

A folder under --homes without `<subdir>` (a learner whose server never started, a system account) gets no row:
the roster names each such folder in a note. An existing --csv or --json file is kept, renamed beside it
(grades.csv -> grades.20261128-171500.csv), before anything is written: a second run never loses the first's.
Both are created readable by their owner alone (0600): they hold every learner's grades. A CSV cell that a
spreadsheet would read as a formula (a notebook's name the learner chose, quoted) starts with ' (spreadsheet_safe).

A room on several servers: run the roster with --json on each, then merge the files into one CSV
(feedbeast.course.roster_merge, which `python -m feedbeast roster merge` runs):

    python -m feedbeast roster merge --csv room.csv --json room.json server-a.json server-b.json

On a server of several GPUs the --jobs are spread over them (--gpus, default: CUDA_VISIBLE_DEVICES's, else every
one nvidia-smi -L lists), each grading's process seeing its GPU alone. Each entry must name one device of this
server that runs work, once (an index, a GPU's UUID or a prefix of it, a MIG instance's UUID, as nvidia-smi -L
prints them): CUDA hides a device it cannot match and every one after it, so the roster refuses such a list before
grading (gpu_devices.problem); it says which GPUs it uses.

Live view during a workshop (who is stuck, and on what):

    sudo python -m feedbeast roster --homes /home --labs 04 05 --csv grades.csv --json grades.json --watch 30 --jobs 4

regrades only the notebooks whose content changed since the last round (their modification time and size
first, then their sha256), prints one line per learner (each lab's status, the first failing check), rewrites
the CSV (and the --json), and starts the next round `--watch` seconds after the last one began. Ctrl-C stops it.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import csv
import difflib
import io
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..isolated import environment
from .coursedir import find as find_course
from .gpu_devices import ENV as gpu_env, Slots, in_reach, listed, problem as gpus_problem, split, unchecked
from .grade import HAZARD_LABS, copied_words, ended_early, gist, lab_of, time_limit

# Printed when the grader could not start as a learner: what the instructor can do about it.
ACCESS_HINT = ("the grader runs as each learner, with the course's Python ({python}): that interpreter and its "
               "environment must be readable and executable by every learner. Keep the course checkout outside a "
               "private home (a 700 or 750 home blocks them), e.g. under /opt or /srv with `chmod -R a+rX`; a venv's "
               "python is a link to the Python it was made from, so that one must be within reach too (a pyenv "
               "Python under /root is not: make workshop PYTHON3=/usr/bin/python3 makes .venv again from that Python, "
               "with WHEELS=wheelhouse in a room with no internet). Or grade with --as-me (learners' code then runs "
               "with your rights)")


def _say(text: str, stream=None) -> None:
    """One write of whole lines: the graders' threads print too, and print() writes a line and its end apart."""
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _interpreter(python: str) -> str:
    """The interpreter as a learner's process meets it: a venv's python and the file it links to."""
    real = os.path.realpath(python)
    return python if real == python else f"{python}, a link to {real}"


DEFAULT_SUBDIR = "feedbeast/labs"     # where the workshop's spawn hook puts each learner's course copy


def _is_dir(path: Path) -> bool:
    """Whether `path` is a folder; False where this user may not look."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _closed(home: Path, labs: Path) -> Path:
    """The first folder on the way from `home` to `labs` that this user may not enter, else `labs` itself (which it
    may enter but not list)."""
    folder = home
    for part in labs.relative_to(home).parts:
        try:
            os.stat(folder / part)
        except PermissionError:
            return folder
        folder = folder / part
    return labs


def _look(home: Path, subdir: str) -> bool | Path:
    """Whether `home` holds `subdir` as a folder this user can list, or the folder it could not read: the hub makes
    each learner's feedbeast/ theirs alone (0700), which only root reads."""
    labs = home / subdir
    try:
        if not labs.is_dir():
            return False
        with os.scandir(labs):
            return True
    except PermissionError:
        return _closed(home, labs)


def scan(homes: Path, subdir: str) -> dict[str, bool | Path]:
    """{name: whether that folder under `homes` holds `subdir`, or the folder of it this user could not read}."""
    return {h.name: _look(h, subdir) for h in _homes(homes)}


def learners(homes: Path, subdir: str, seen: dict | None = None) -> dict[str, Path]:
    """{name: labs folder} for each folder under `homes` holding `subdir` (`seen`: scan()'s, else scanned now)."""
    seen = scan(homes, subdir) if seen is None else seen
    return {name: Path(homes) / name / subdir for name, has in seen.items() if has is True}


def _homes(homes: Path) -> list[Path]:
    """The folders under `homes` (not links: a link could lead to anyone's files)."""
    return [h for h in sorted(Path(homes).iterdir()) if h.is_dir() and not h.is_symlink()]


def without_labs(homes: Path, subdir: str, seen: dict | None = None) -> list[str]:
    """The folders under `homes` that hold no `subdir`: no course copy, so no row (the roster names them)."""
    seen = scan(homes, subdir) if seen is None else seen
    return [name for name, has in seen.items() if has is False]


def unreadable(homes: Path, subdir: str, seen: dict | None = None) -> dict[str, Path]:
    """{name: the folder this user could not read} for each learner whose `subdir` it cannot list."""
    seen = scan(homes, subdir) if seen is None else seen
    return {name: has for name, has in seen.items() if isinstance(has, Path)}


def _read_advice(only: bool = True) -> str:
    """What to do about a learner's folder this user cannot read (`only`: with the --only way out)."""
    if os.geteuid() == 0:       # root refused: a network file system that maps root to nobody
        return "root cannot read it either here: run the roster on the server whose disk holds the homes"
    return "run the roster as root (sudo)" + (", or with --only for the learners this account can read" if only else "")


def unread_doc(name: str, folder: Path) -> dict:
    """The row of a learner whose folder could not be read: an error in every column (unread: nothing is known of
    their labs, so not missing), and what to do."""
    return {"learner": name, "exit": 1, "labs": [], "refused": [], "seconds": 0.0, "unread": str(folder),
            "error": f"this account cannot read {folder}: {_read_advice(only=False)}"}


def fill_unread(docs: list[dict], labs: list[str]) -> None:
    """Give each unread learner's row the columns' labs as not graded (their ungraded labs)."""
    for d in docs:
        if d.get("unread"):
            d["ungraded"] = list(labs)


def unread_note(blocked: dict[str, Path], every: bool) -> str:
    """The learners whose folders this user cannot read; `every`: no learner could be read, nothing is graded."""
    folders = ", ".join(str(f) for f in list(blocked.values())[:5]) + (", ..." if len(blocked) > 5 else "")
    if every:
        return (f"roster: this account cannot read the learners' folders ({folders}): {_read_advice()}; nothing was "
                "graded")
    return (f"roster: this account cannot read the folders of {_count(len(blocked), 'learner')} ({folders}): their "
            f"rows say error; {_read_advice()}")


def _held(home: Path, depth: int) -> set[str]:
    """The folders `depth` levels down in `home`, as paths relative to it (those this user can see)."""
    if depth > 3:           # a deeper --subdir: no guess, rather than a walk through whole homes
        return set()
    return {str(p.relative_to(home)) for p in home.glob("/".join(["*"] * depth)) if _is_dir(p)}


def subdir_guess(homes: Path, subdir: str) -> str | None:
    """The --subdir that the folders under `homes` hold, when one is evident: the default, else the one closest in
    name to `subdir` (as deep)."""
    held = set().union(*(_held(h, len(Path(subdir).parts)) for h in _homes(homes)))
    if DEFAULT_SUBDIR in held:
        return DEFAULT_SUBDIR
    close = difflib.get_close_matches(subdir, sorted(held), n=1)
    return close[0] if close else None


def no_learner(homes: str, subdir: str, seen: dict) -> str:
    """Why no folder under `homes` is a learner's (none holds `subdir`), with the --subdir to give where one is
    evident: a command-line problem, said before anything is graded."""
    if not seen:
        return (f"roster: --homes {homes} holds no folder: give the folder that holds one folder per learner "
                "(e.g. /home); nothing was graded")
    said = f"roster: no folder under {homes} holds {subdir} (of {_count(len(seen), 'folder')})"
    if guess := subdir_guess(Path(homes), subdir):
        return f"{said}: they hold {guess}: give --subdir {guess}; nothing was graded"
    if subdir != DEFAULT_SUBDIR:
        return (f"{said}: the default --subdir {DEFAULT_SUBDIR} is where the workshop puts each learner's course "
                "copy; give --subdir the folder that holds the learners' labs; nothing was graded")
    return (f"{said}: the workshop copies the course there at a learner's first start (has any learner's server "
            "started?); for another layout give --subdir the folder that holds their labs; nothing was graded")


def unknown_learners(homes: Path, subdir: str, only: list[str], found: dict, blocked: dict | None = None) -> list[str]:
    """What is wrong with each --only name that cannot be graded: no such folder (with the close names, or the
    learners there are), or a folder without `subdir`. A learner whose folder cannot be read is no such name: their
    row says error (unread_doc)."""
    out = []
    known = sorted([*found, *(blocked or {})])
    for name in only:
        if name in known:
            continue
        if (Path(homes) / name).is_dir():
            out.append(f"{name} has no {subdir} in {Path(homes) / name} (their server never started, or the course "
                       "copy is elsewhere: --subdir)")
            continue
        close = difflib.get_close_matches(name, known, n=3)
        out.append(f"no learner {name} under {homes}: " + (f"did you mean {' or '.join(close)}?" if close else
                   f"the learners there are {', '.join(known) or 'none'}"))
    return out


def course_labs(solutions: Path) -> set[str]:
    """The course's lab numbers: those of its solutions (solutions/NN-*.ipynb). A learner's notebook of another
    number (12-my-notes.ipynb) is no lab of the course: no check grades it."""
    return {p.name[:2] for p in Path(solutions).glob("[0-9][0-9]-*.ipynb")}


def unknown_labs(wanted: list[str], solutions: Path) -> str | None:
    """Why --labs names a lab the course (solutions/NN-*.ipynb) has not, with the labs there are; None when every
    one is known."""
    course = sorted(p.name for p in Path(solutions).glob("[0-9][0-9]-*.ipynb"))
    missing = [n for n in wanted if n not in {c[:2] for c in course}]
    if not missing:
        return None
    return (f"no lab {', '.join(missing)} in the course ({solutions}): the labs are {', '.join(course) or 'none'}; "
            "give their numbers (--labs 0 4)")


def course_in_homes(solutions: str, homes: str) -> str | None:
    """Why the course's solutions/ must not lie under --homes: there it is a learner's copy, which that learner can
    edit (run from inside it, the roster finds that copy first); None when it lies elsewhere."""
    if not Path(solutions).resolve().is_relative_to(Path(homes).resolve()):
        return None
    return (f"the course found, {Path(solutions).resolve().parent}, lies under --homes {homes}: it is a learner's "
            "copy, which that learner can edit, so no one is graded against it; name the instructor's checkout with "
            "--solutions <checkout>/solutions (or set FEEDBEAST_COURSE=<checkout>); nothing was graded")


def output_problem(option: str, path: str) -> str | None:
    """Why the roster (or its merge) could not write `path` (checked before grading: an hour of grading is not lost
    on it)."""
    p = Path(path)
    folder = p.parent
    if not folder.is_dir():
        # made by this user where it may, else by root and handed to this user: the roster writes there next
        mine = os.geteuid() == 0 or os.access(next(p for p in folder.parents if p.exists()), os.W_OK)
        make = (f"install -d -m 700 {folder}" if mine else
                f"sudo install -d -m 700 -o {pwd.getpwuid(os.geteuid()).pw_name} {folder}")
        return (f"{option} {path}: the folder {folder} does not exist: create it first ({make}: grades where no "
                "learner can read them), or name a file in a folder that exists")
    if p.is_dir():
        return f"{option} {path} is a folder: name a file in it ({p / ('grades.' + option[2:])})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return (f"{option} {path}: the folder {folder} is not writable by this user: run the roster as its owner, "
                "or name another folder")
    return None


def keep_previous(path: str) -> Path | None:
    """Rename an existing grades file to <name>.<date-time><suffix> beside it (a number added when that is taken),
    so that a second run keeps the first one's grades; the new name, or None when there was no file."""
    p = Path(path)
    if not p.exists():
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(p.stat().st_mtime))
    kept, n = p.with_name(f"{p.stem}.{stamp}{p.suffix}"), 1
    while kept.exists():
        n += 1
        kept = p.with_name(f"{p.stem}.{stamp}-{n}{p.suffix}")
    p.rename(kept)
    return kept


def private(path, flags):
    """open()'s opener for a grades file: created readable by its owner alone (0600), since it names every learner
    with a grade."""
    return os.open(path, flags, 0o600)


def write_private(path, text: str) -> None:
    """Write a grades file whole: into a private file beside it, then renamed over it, so that a reader (a merge,
    the live view's next round) or a Ctrl-C in between never meets half a file."""
    part = Path(f"{path}.{os.getpid()}.part")
    try:
        with open(part, "w", newline="", opener=private) as f:
            f.write(text)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def is_lab(name: str, course=None) -> bool:
    """Whether a notebook's name is a lab's, NN-... (of a lab of the course, `course`'s numbers, when given): another
    (Untitled.ipynb, which File > New writes in labs/; 12-my-notes.ipynb) is no lab of the course, so it gets no
    grade and no column."""
    return re.match(r"\d\d-", name) is not None and (course is None or name[:2] in course)


def _not_labs(names: list[str], course=None) -> list[str]:
    """Why each notebook of `names` that is no lab of the course is not graded."""
    out = []
    for name in names:
        if not is_lab(name):
            out.append(f"{name}: not a lab (no NN- number in its name): not graded; if it holds a lab's work, name it "
                       "as in the course's labs/")
        elif not is_lab(name, course):
            out.append(f"{name}: no lab {name[:2]} in the course: not graded; the course's labs are "
                       f"{_labs_span(course) if course else 'none'}: if it holds a lab's work, name it as in labs/")
    return out


def _copy_labs(labs: Path, dest: Path, wanted: list[str] | None, names=(),
               course=None) -> tuple[list[Path], list[str]]:
    """Copy the regular lab notebooks (NN-*.ipynb) of `labs` into `dest` without following links. One notebook
    per lab: where a lab has several (a copy, a backup), the one with the course's name (`names`) is graded, or
    the only one; the others are refused, by name, so that no grade comes from a file the learner did not mean.
    A notebook that is no lab's, or of a number that is no lab of the course (`course`, when given), is refused too,
    whatever `wanted` says: the instructor sees it was not graded."""
    notebooks = sorted((e for e in os.scandir(labs) if e.name.endswith(".ipynb")), key=lambda e: e.name)
    refused = _not_labs([e.name for e in notebooks], course)
    copies = []
    entries = [e for e in notebooks if is_lab(e.name, course) and not (wanted and e.name[:2] not in wanted)]
    by_lab: dict[str, list] = {}
    for e in entries:                                  # a lab's notebooks, by their NN- prefix
        by_lab.setdefault(lab_of(e.name), []).append(e)
    keep = {}                                          # lab -> the name of the notebook that stands for it
    for lab, group in by_lab.items():
        own = [e for e in group if e.name in names]
        if own or len(group) == 1:
            keep[lab] = (own or group)[0].name
            continue
        refused.append(f"lab {lab}: {len(group)} notebooks ({', '.join(e.name for e in group)}) and none named as the "
                       "course names it: not graded; keep one, named as in the course's labs/")
    for entry in entries:
        lab = next(k for k, g in by_lab.items() if entry in g)
        if entry.name != keep.get(lab):
            if lab in keep:
                refused.append(f"{entry.name}: another notebook of lab {lab}: not graded (the lab's notebook is "
                               f"{keep[lab]})")
            continue
        if not entry.is_file(follow_symlinks=False):
            refused.append(f"{entry.name}: not a regular file (a link?): not graded")
            continue
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(dest / entry.name, "wb") as out:
            shutil.copyfileobj(src, out)
            saved = os.fstat(src.fileno())
        os.utime(dest / entry.name, ns=(saved.st_atime_ns, saved.st_mtime_ns))   # the grade says when it was saved
        copies.append(dest / entry.name)
    return copies, refused


def _as_owner(folder: Path):
    """preexec_fn that drops to the owner of `folder` (root only; None when not root or owned by root)."""
    st = os.stat(folder)
    if os.geteuid() != 0 or st.st_uid == 0:
        return None, None
    uid, gid = st.st_uid, st.st_gid

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return drop, (uid, gid)


def jobs_count(value: str) -> int:
    """--jobs: how many learners at once, a whole number from 1."""
    import argparse
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give how many learners to grade at once, a whole number from 1 "
                                         "(1 grades one after another)")
    return n


def grade_learner(name: str, labs: Path, wanted=None, timeout: int = 600, learner_timeout: int = 3600,
                  solutions: Path | None = None, as_owner: bool = True, hazards: str = "auto",
                  device: str | None = None) -> dict:
    """Grade one learner in a fresh process; the JSON document of `feedbeast grade --json`. `device`: the GPU
    (CUDA_VISIBLE_DEVICES's name of it) that process runs on; None leaves the environment's choice."""
    solutions = Path(solutions) if solutions else find_course() / "solutions"
    with tempfile.TemporaryDirectory(prefix=f"fb-roster-{name}-") as tmp:
        tmp = Path(tmp)
        course = course_labs(solutions)
        copies, refused = _copy_labs(labs, tmp, wanted, names={p.name for p in solutions.glob("*.ipynb")},
                                     course=course)
        left = refused_labs(refused, copies, course)
        if not copies:
            return {"learner": name, "exit": 1, "labs": [], "refused": refused, "seconds": 0.0,
                    **({"ungraded": left} if left else {}),
                    "error": (f"no lab notebook graded in {labs}: {refused[0]}" if refused else
                              f"no notebook of lab {', '.join(wanted)} in {labs}" if wanted else
                              f"no lab notebook in {labs}")}
        drop, ids = _as_owner(labs) if as_owner else (None, None)
        if as_owner and ids is None and os.geteuid() == 0:
            _say(f"roster: note: {labs} belongs to root, so {name}'s labs are graded as root (their code runs with "
                 f"root's rights): give the folder to the learner (chown -R <learner> {labs}) to grade them as "
                 "themselves", sys.stderr)
        env = environment()             # (graded in a thread pool: read whole while another thread changes it)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if device is not None:      # an index as nvidia-smi numbers the GPUs (gpu_devices.ENV)
            env.update(gpu_env, CUDA_VISIBLE_DEVICES=device)
        if ids:
            for p in [tmp, *copies]:
                os.chown(p, *ids)
            env["HOME"] = str(tmp)
        cmd = [sys.executable, "-m", "feedbeast", "grade", "--json", "--learner", name,
               "--timeout", str(timeout), "--solutions", str(solutions), "--hazards", hazards, *map(str, copies)]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=learner_timeout,
                               preexec_fn=drop)
            doc = json.loads(r.stdout)
        except subprocess.TimeoutExpired:
            doc = {"learner": name, "exit": 1, "labs": [],
                   "error": f"grading ran past {learner_timeout} s"}
        except (OSError, subprocess.SubprocessError) as e:   # e.g. the course's Python not readable by the learner
            who = f" as uid {ids[0]}" if ids else ""
            doc = {"learner": name, "exit": 1, "labs": [],
                   "error": f"could not start the grader{who}: {e}"}
            if ids:     # as the learner: most likely the course's Python is out of their reach
                doc["hint"] = ACCESS_HINT.format(python=_interpreter(cmd[0]))
        except json.JSONDecodeError:
            tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
            doc = {"learner": name, "exit": 1, "labs": [],
                   "error": f"the grader gave no report (exit {r.returncode}): " + " | ".join(tail)}
            if ids and any(s in r.stderr for s in ("Permission denied", "No module named 'feedbeast'")):
                doc["hint"] = ACCESS_HINT.format(python=_interpreter(cmd[0]))   # it started, but the course is out of reach
        # handed in, not graded (refused, or the grader failed): these labs' rows say error, not missing
        if ungraded := set(left) | ({lab_of(c) for c in copies} if "error" in doc else set()):
            doc["ungraded"] = sorted(ungraded)
        doc["learner"] = name
        doc["seconds"] = round(time.time() - t0, 1)
        if device is not None:
            doc["device"] = device
        doc["refused"] = refused
        for lab in doc.get("labs", []):   # the copy's path means nothing to the reader: the learner's
            lab["notebook"] = str(labs / Path(lab["notebook"]).name)
        return doc


def refused_labs(refused: list[str], copies: list[Path], course: set[str]) -> list[str]:
    """The course's labs handed in and refused whole (two notebooks, neither with the course's name; a link): not
    graded, so their rows say error, not missing (nothing handed in)."""
    graded = {lab_of(c) for c in copies}
    return sorted({n for why in refused if (n := note_lab(why)) in course} - graded)


def given_baseline(labs: list[str], solutions: Path, timeout: int = 600, hazards: str = "auto",
                   device: str | None = None) -> dict[str, list | None]:
    """{lab: for each check cell, the names of the checks the lab as given passes here}: each lab written from its
    solution (labs.lab_text, what `make labs` writes) into a fresh folder of the roster's own and graded on this
    machine as a learner's is. A check that an empty kernel meets (lab 06's register split and resources) is no
    learner's doing: score() does not count a failed lab's passes of these (a cell the lab as given breaks off
    early still passed what it passed). None for a lab that cannot be graded here (its own cells broke, it could
    not be read); a lab whose grading as given hung or died is left out, to be graded again."""
    from .labs import lab_text
    with tempfile.TemporaryDirectory(prefix="fb-roster-given-") as tmp:
        for sol in sorted(Path(solutions).glob("[0-9][0-9]-*.ipynb")):
            if lab_of(sol) in labs:
                (Path(tmp) / sol.name).write_text(lab_text(sol))
        doc = grade_learner("(the labs as given)", Path(tmp), labs, timeout, solutions=solutions, as_owner=False,
                            hazards=hazards, device=device)
    return {lab["lab"]: None if not lab.get("cells") or lab.get("setup") or lab.get("refused") else
            [sorted({c["name"] for c in lab["checks"] if c.get("cell") == i and c["status"] == "passed"})
             for i in range(len(lab["cells"]))]
            for lab in doc.get("labs", []) if not ended_early(lab.get("error", ""))}


def baseline_labs(docs: list[dict]) -> list[str]:
    """The labs whose failed grades a baseline changes: failed, with cells, neither untrusted nor as given."""
    return sorted({lab["lab"] for d in docs for lab in d.get("labs", []) if lab_status(lab) == "failed"
                   and lab.get("cells") and not (lab.get("untrusted") or lab.get("untouched"))})


def with_baseline(docs: list[dict], baseline) -> list[str]:
    """Give each failed lab of `docs` what its lab as given passes (`baseline(labs)`, asked for the labs that some
    learner failed); the labs left without, for a note. A baseline that breaks loses no grade: those labs are
    named, and scored as before."""
    failed = baseline_labs(docs)
    try:
        given = baseline(failed) if failed else {}
    except Exception as e:      # (the learners' grades are in hand: written whatever happens here)
        _say(f"roster: grading the labs as given failed ({type(e).__name__}: {e})", sys.stderr)
        given = {}
    for d in docs:
        for lab in d.get("labs", []):
            if given.get(lab["lab"]) is not None and lab_status(lab) == "failed" \
                    and len(lab.get("cells") or ()) == len(given[lab["lab"]]):
                lab["given_passed"] = given[lab["lab"]]
    return [n for n in failed if given.get(n) is None]


def baseline_of(args, slots: Slots | None = None):
    """with_baseline's `baseline` for a run of the roster: each lab as given graded once per run, as soon as some
    learner failed it; one whose grading as given was cut short is graded again when next asked (a live view asks
    every round)."""
    known: dict[str, list | None] = {}      # None: not to be known on this machine (its own cells broke here)
    slots = slots or Slots([], 1)

    def baseline(labs):
        if todo := [n for n in labs if n not in known]:
            _say(f"roster: grading lab {', '.join(todo)} as given: the checks it passes earn a failed lab nothing",
                 sys.stderr)
            with slots.one() as device:
                known.update(given_baseline(todo, Path(args.solutions), args.timeout, args.hazards, device))
        return {n: known[n] for n in labs if n in known}
    return baseline


def _baseline_note(left: list[str]) -> str:
    return (f"roster: note: lab {', '.join(left)} as given could not be graded here, so its failed labs are scored "
            "without it: a check that the lab as given passes counts for them")


def score(lab: dict) -> float | None:
    """A lab with no failed check scores 100 (ok, or partial: its status says some checks could not run), and None
    when no check ran at all (a lab whose every check needs a GPU the room lacks: nothing was measured, so no
    number). A failed lab scores the mean, over the lab's check cells that checked something here, of each cell's
    100 x passed / (passed + failed), each check with its count; a skipped check (it could not run on this machine)
    is left out, neither earned nor lost. A pass of a check that the lab as given passes on the same machine
    (`given_passed`, with_baseline: a register budget an empty kernel meets) earns nothing: it comes off both
    counts (a failure of such a check still counts), and a cell with nothing left is left out. A cell the notebook
    cut short (an error out of its own code, a hang, a cell never run: grade._cell_tally) scores 0: it ran only
    some of its checks, and a share of those would let a notebook that stops a cell early score above the honest
    wrong answer. A notebook whose code changed what the checks use scores 0, and so does one whose code is the
    lab's as given. A failed lab scores at most 99.9, so it never ranks with or above a lab that did not fail. A
    report with no cells (written before the grader kept them; a notebook the grader could not read is an `error`,
    not scored) is scored over its checks as a whole, counting at least one failure."""
    ran = {"passed": 0, "failed": 0}
    for c in lab.get("checks", []):
        if c["status"] in ran:
            ran[c["status"]] += c.get("count", 1)
    if lab.get("status") != "failed":
        return 100.0 if ran["passed"] else None
    if not lab.get("cells"):
        return min(99.9, round(100.0 * ran["passed"] / (ran["passed"] + max(ran["failed"], 1)), 1))
    if lab.get("untrusted") or lab.get("untouched"):
        return 0.0
    given = lab.get("given_passed") or ()
    if len(given) != len(lab["cells"]):     # none (graded alone, or an older JSON), or another version of the lab
        given = [()] * len(lab["cells"])
    shares = []
    for i, (c, names) in enumerate(zip(lab["cells"], given)):
        free = sum(x.get("count", 1) for x in lab.get("checks", [])
                   if x.get("cell") == i and x["status"] == "passed" and x["name"] in names)
        if c["cut"]:
            shares.append(0.0)
        elif c["passed"] + c["failed"] > free:      # else it passed only what the lab as given passes: left out
            shares.append((c["passed"] - free) / (c["passed"] + c["failed"] - free))
    return min(99.9, round(100.0 * sum(shares) / len(shares), 1)) if shares else 0.0


def lab_status(lab: dict) -> str:
    """A graded lab's status as the roster shows it, on the screen as in the CSV: error when the lab's own cells
    broke in the learner's grader, or the grader graded nothing of the notebook (`refused`: it cannot be read, or is
    no lab; the grader's exit 3): the grader's failed would read as the learner's wrong answer. A lab with nothing
    of the learner's written (the grader's `untouched`) is `not started` (scored 0)."""
    if lab.get("setup") or lab.get("refused"):
        return "error"
    # nothing of the learner's written yet: the grader's failed would read as a wrong answer
    return "not started" if lab.get("untouched") else lab["status"]


def spreadsheet_safe(value):
    """A CSV cell that a spreadsheet shows as text: a string that starts with =, +, -, @, a tab or a carriage
    return is a formula to Excel, LibreOffice and Google Sheets (OWASP, "CSV Injection"), and a learner names the
    files whose names the last column quotes. Such a string gets a leading ' (shown by none of them); numbers pass."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def columns(docs: list[dict], course=None) -> list[str]:
    """The labs graded or handed in, as the CSV's columns: lab numbers only (a notebook graded under another name, in
    an older JSON, is no column), and of the course's labs (`course`) where given."""
    return sorted(n for n in {lab["lab"] for d in docs for lab in d.get("labs", [])}
                  | {n for d in docs for n in d.get("ungraded", [])}
                  if re.fullmatch(r"\d\d", n) and (course is None or n in course))


def write_csv(docs: list[dict], path, labs: list[str] | None = None, course=None) -> list[str]:
    """One row per learner; returns the lab numbers used as columns (columns() when `labs` is None). Text cells pass
    spreadsheet_safe."""
    if labs is None:
        labs = columns(docs, course)
    f = io.StringIO()
    w = csv.writer(f)
    w.writerow(["username"] + [h for n in labs for h in (f"lab {n}", f"lab {n} status")]
               + ["labs ok", "first failing check"])
    for d in docs:
        by_lab = {lab["lab"]: lab for lab in d.get("labs", [])}
        row, ok = [d["learner"]], 0
        for n in labs:
            lab = by_lab.get(n)
            if lab is None and n in d.get("ungraded", []):
                row += ["", "error"]     # not graded: no number an LMS would take for a grade
                continue
            if lab is None:
                row += [0.0, "missing"]      # written as score() writes a 0: one form in the column
                continue
            if lab_status(lab) == "error":
                row += ["", "error"]     # the lab's own cells broke in the learner's grader: nothing graded
                continue
            points = score(lab)
            row += ["" if points is None else points, lab_status(lab)]   # "": no check ran, no grade to import
            ok += lab["status"] == "ok"
        # a notebook not graded (a second notebook of a lab, a link): named in the row, not only on the screen
        notes = "; ".join([why.split(": not graded")[0] + ": not graded" for why in d.get("refused", [])]
                          + [f"lab {lab['lab']}: the solution's code, {copied_words(lab.get('copied_apart', 0))}"
                             for lab in sorted(d.get("labs", []), key=lambda x: x["lab"])
                             if lab.get("copied") and lab["lab"] in labs])
        last = "; ".join(x for x in (first_failing(d, labs), notes) if x)
        w.writerow([spreadsheet_safe(x) for x in row + [ok, last]])
    write_private(path, f.getvalue())        # whole or not at all, as the JSON
    return labs


def first_failing(doc: dict, labs=None) -> str:
    """The first lab (in order) with a failed check, as 'lab 04: check name: the gist of why' ('' if none). A lab
    not graded comes first the same way; a lab not started counts only when no other lab failed: an untouched lab
    00 must not hide lab 03's compile error, which is what the instructor needs to see."""
    chosen = [lab for lab in sorted(doc.get("labs", []), key=lambda x: x["lab"]) if labs is None or lab["lab"] in labs]
    for lab in chosen:
        if lab.get("setup") or lab.get("refused"):
            # (longer than a failed check's gist: why, and what to do, where nothing else in the row says it)
            return f"lab {lab['lab']}: not graded: {gist(lab.get('setup') or lab.get('error') or '', limit=320)}"
        if lab.get("untouched"):
            continue
        for c in lab.get("checks", []):
            if c["status"] == "failed":
                why = gist(c.get("message") or "")
                return f"lab {lab['lab']}: {c['name']}" + (f": {why}" if why else "")
    # no failed check: why a lab was not graded, if a grader said (also in a merged row whose other labs were graded)
    if doc.get("error"):        # on one line, cut at a word
        return gist(" ".join(doc["error"].split()))
    untouched = [lab["lab"] for lab in chosen if lab.get("untouched")]
    return f"lab {untouched[0]}: not started (its code is the lab's as given)" if untouched else ""


# ---- the live view ----------------------------------------------------------------------------------------

def _fingerprint(path: Path, last: tuple | None) -> tuple:
    """(mtime_ns, size, sha256) of a lab notebook; the hash is computed again only when time or size moved."""
    st = os.stat(path, follow_symlinks=False)
    if last is not None and last[:2] == (st.st_mtime_ns, st.st_size):
        return last
    import hashlib
    return st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest()


def watch_round(found: dict[str, Path], state: dict, grade_fn, jobs: int = 1, wanted=None, course=None) -> list[str]:
    """One round of the live view: grade what changed, keep the rest. `state` carries over between rounds:
    {learner: {"seen": {file: fingerprint}, "labs": {lab: lab dict}, "doc": last document}}. `course`: the course's
    lab numbers (a notebook of another is no lab). Returns the "learner lab" pairs graded this round."""
    todo = {}
    for name, labs in found.items():
        st = state.setdefault(name, {"seen": {}, "labs": {}, "doc": {"learner": name, "labs": []}})
        changed, here = [], set()
        for entry in sorted(os.scandir(labs), key=lambda e: e.name):
            if not (entry.name.endswith(".ipynb") and is_lab(entry.name, course)) \
                    or (wanted and entry.name[:2] not in wanted):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            here.add(entry.name)
            fp = _fingerprint(Path(entry.path), st["seen"].get(entry.name))
            if st["seen"].get(entry.name, (None, None, None))[2] != fp[2]:
                changed.append(entry.name[:2])
            st["seen"][entry.name] = fp
        for gone in set(st["seen"]) - here:        # a notebook removed (a second copy of a lab): that lab again
            del st["seen"][gone]
            if any(n[:2] == gone[:2] for n in here):
                changed.append(gone[:2])
            elif st["labs"].pop(gone[:2], None) is not None:     # its lab's only notebook: no grade stands
                st["doc"] = {**st["doc"], "labs": [st["labs"][k] for k in sorted(st["labs"])]}
        if changed:
            todo[name] = sorted(set(changed))

    def one(item):
        name, labs_wanted = item
        return name, grade_fn(name, found[name], labs_wanted)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for name, doc in pool.map(one, todo.items()):
            st = state[name]
            for lab in doc.get("labs", []):
                st["labs"][lab["lab"]] = lab
            for lab in refused_labs(doc.get("refused", []), [], set(doc.get("ungraded", []))):
                st["labs"].pop(lab, None)         # refused now (two notebooks, a link): an earlier grade stands no more
            # a note about a lab not graded this round (a second notebook of lab 04) stands until that lab is graded,
            # and so does a lab left ungraded
            kept = [n for n in st["doc"].get("refused", []) if note_lab(n) and note_lab(n) not in todo[name]
                    and (course is None or note_lab(n) in course)]
            left = {n for n in st["doc"].get("ungraded", []) if n not in todo[name]} | set(doc.get("ungraded", []))
            st["doc"] = {**doc, "labs": [st["labs"][k] for k in sorted(st["labs"])],
                         "refused": kept + [n for n in doc.get("refused", []) if n not in kept],
                         **({"ungraded": sorted(left)} if left else {})}
    return [f"{n} {lab}" for n, labs in todo.items() for lab in labs]


def note_lab(note: str) -> str | None:
    """The lab a roster note is about ('04-x-Copy1.ipynb: another notebook of lab 04', 'lab 04: 2 notebooks'), or
    None (a notebook that is no lab's)."""
    m = re.match(r"(?:lab )?(\d\d)\b", note)
    return m.group(1) if m else None


def statuses(doc: dict) -> list[tuple[str, str]]:
    """(lab, status) for each lab of a learner, as the CSV says it: a lab handed in and not graded (`ungraded`) is an
    error."""
    seen = {lab["lab"]: lab_status(lab) for lab in doc.get("labs", [])}
    return sorted({**{n: "error" for n in doc.get("ungraded", [])}, **seen}.items())


def screen_line(doc: dict, on: str = "") -> str:
    """A learner's line as graded: each lab's status, why they could not be graded (when so), the first failing
    check, the notebooks refused. `on`: the GPU it ran on, when said."""
    labs = ", ".join(f"{n} {st}" for n, st in statuses(doc))
    head = ": ".join(filter(None, (labs, doc.get("error")))) or "nothing graded"
    failed = any(lab_status(lab) in ("failed", "error") for lab in doc.get("labs", []))
    why = [f"  {first_failing(doc)}"] if failed and first_failing(doc) else []
    return "\n".join([f"{doc['learner']}: {head} ({on}{doc['seconds']:.0f} s)", *why,
                      *(f"  refused {note}" for note in doc.get("refused", []))])


def not_graded(docs: list[dict]) -> list[str]:
    """Each learner of `docs` with a lab handed in and not graded, or none graded, as 'ann (lab 01, 03)' or 'bob'."""
    out = []
    for d in docs:
        labs = [n for n, st in statuses(d) if st == "error"]
        if labs or not d.get("labs"):
            out.append(f"{d['learner']} (lab {', '.join(labs)})" if labs else d["learner"])
    return out


def watch_lines(state: dict) -> list[str]:
    """One line per learner: each lab's status, then the first failing check."""
    out = []
    for name in sorted(state):
        doc = state[name]["doc"]
        labs = " ".join(f"{n}:{st}" for n, st in statuses(doc))
        stuck = first_failing(doc)
        out.append(f"{name:<16} {labs or '-':<40} {stuck}")
    return out


def hints(docs) -> list[str]:
    """What the instructor can do about learners who could not be graded (one line per distinct hint)."""
    out = []
    for d in docs:
        if d.get("hint") and f"roster: hint: {d['hint']}" not in out:
            out.append(f"roster: hint: {d['hint']}")
    broken = sorted({d["learner"] for d in docs for lab in d.get("labs", []) if lab.get("setup")})
    if broken:      # the same machine fault repeats in every learner's grade: say it once, with the first cause
        first = next(lab["setup"] for d in docs for lab in d.get("labs", []) if lab.get("setup"))
        out.append(f"roster: hint: the lab's own cells could not run in the grader of {len(broken)} learner(s) "
                   f"({', '.join(broken[:5])}{', ...' if len(broken) > 5 else ''}), so those labs are left ungraded "
                   f"(error, no score): {gist(first)}. Run `python -m feedbeast grade` on one lab as such a learner "
                   "to see it, fix this machine's setup (the course's Python, its CUDA libraries, the GPU's device "
                   "files), then run the roster again")
    return out


def lab_number(text: str) -> str:
    """A --labs value as the two digits lab files start with: 4 and 04 are both lab 04 (as in make reset-labs)."""
    if not re.fullmatch(r"[0-9]{1,2}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a lab number: give numbers such as 4 or 04")
    return f"{int(text):02d}"


def _labs_span(labs) -> str:
    """'03-09' for consecutive lab numbers, else '03, 05'."""
    n = sorted(int(x) for x in labs)
    return f"{n[0]:02d}-{n[-1]:02d}" if n == list(range(n[0], n[-1] + 1)) else ", ".join(f"{x:02d}" for x in n)


def watch(args, found, slots: Slots, unread=()) -> int:
    """The live view's rounds; `unread`: the rows of learners whose folders this user cannot read."""
    state: dict = {d["learner"]: {"seen": {}, "labs": {}, "doc": d} for d in unread}
    rounds = 0
    baseline = baseline_of(args, slots)
    course = course_labs(args.solutions)

    def grade_fn(name, labs, wanted):
        with slots.one() as device:
            return grade_learner(name, labs, wanted, args.timeout, solutions=args.solutions,
                                 as_owner=not args.as_me, hazards=args.hazards, device=device)
    try:
        while True:
            t0 = time.time()
            found = learners(Path(args.homes), args.subdir) if not args.only else found
            graded = watch_round(found, state, grade_fn, args.jobs, args.labs, course)
            docs = [state[n]["doc"] for n in sorted(state)]
            left = with_baseline(docs, baseline)     # (said every round: the screen is cleared)
            fill_unread(docs, args.labs or columns([d for d in docs if not d.get("unread")], course))
            write_csv(docs, args.csv, args.labs or None, course)
            if args.json:       # each round, as the CSV: the file a merge or a later roster reads
                write_private(args.json, json.dumps(docs, indent=1) + "\n")
            if sys.stdout.isatty():
                print("\x1b[2J\x1b[H", end="")
            wait = max(0.0, args.watch - (time.time() - t0))     # a round starts every --watch seconds
            last = bool(args.rounds) and rounds + 1 >= args.rounds
            print(f"roster {time.strftime('%H:%M:%S')}: {_count(len(state), 'learner')}, {len(graded)} notebook(s) "
                  f"graded this round in {time.time() - t0:.0f} s" + ("; the last round" if last else
                                                                       f"; next round in {wait:.0f} s"))
            print("\n".join(watch_lines(state) + hints(docs) + ([_baseline_note(left)] if left else [])), flush=True)
            rounds += 1
            if args.rounds and rounds >= args.rounds:
                return 0
            time.sleep(max(0.0, args.watch - (time.time() - t0)))
    except KeyboardInterrupt:
        return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedbeast roster", description=__doc__.split("\n\n")[0],
                                 epilog="A room on several servers: run the roster with --json on each, then "
                                        "`python -m feedbeast roster merge --csv room.csv a.json b.json ...` "
                                        "(see --help there).")
    ap.add_argument("--homes", required=True, help="folder with one folder per learner (e.g. /home)")
    ap.add_argument("--subdir", default=DEFAULT_SUBDIR, help="labs folder inside a learner's folder")
    ap.add_argument("--labs", nargs="*", default=None, type=lab_number,
                    help="lab numbers to grade, 4 or 04 (default: all found)")
    ap.add_argument("--only", nargs="*", default=None, help="learner names to grade (default: all)")
    ap.add_argument("--csv", required=True, help="CSV to write (one row per learner)")
    ap.add_argument("--json", default=None, help="also write every check of every learner here")
    ap.add_argument("--timeout", type=time_limit, default=600, help="seconds per cell (whole, from 1)")
    ap.add_argument("--solutions", default=None, help="the course's solutions/ (default: those of the checkout found from the "
                                                      "working directory, or FEEDBEAST_COURSE)")
    ap.add_argument("--hazards", choices=("auto", "on", "off"), default="auto",
                    help=f"hazard builds (FEEDBEAST_HAZARDS=1) for labs {_labs_span(HAZARD_LABS)} and later labs "
                         "whose kernels include an fb/ header (auto: when a GPU is here)")
    ap.add_argument("--jobs", type=jobs_count, default=1,
                    help="learners graded at once (each in its own process; on a GPU up to 2 GB of host memory each)")
    ap.add_argument("--gpus", default=None, metavar="LIST",
                    help="GPUs to spread the gradings over, as CUDA_VISIBLE_DEVICES names them: 0,1 or "
                         "MIG-<uuid>,MIG-<uuid> (default: CUDA_VISIBLE_DEVICES's where it is set, else every GPU "
                         "or MIG instance nvidia-smi -L lists; job i runs on the (i mod n)th)")
    ap.add_argument("--as-me", action="store_true",
                    help="grade as the user running the roster (root under sudo) instead of as each learner: "
                         "learners' code then runs with that user's rights (not recommended)")
    ap.add_argument("--watch", type=float, default=0, metavar="SECONDS",
                    help="live view: every SECONDS, regrade the notebooks that changed and print who is stuck")
    ap.add_argument("--rounds", type=int, default=0, help="with --watch: stop after this many rounds")
    args = ap.parse_args(argv)
    if args.labs:
        args.labs = sorted(set(args.labs))
    if not Path(args.homes).is_dir():
        print(f"roster: --homes {args.homes} is not a folder: give the folder that holds one folder per learner "
              "(e.g. /home)", file=sys.stderr)
        return 2
    if _is_dir(Path(args.homes) / args.subdir):     # one learner's home: its labs would be nobody's row
        print(f"roster: --homes {args.homes} is one learner's folder (it holds {args.subdir}): give the folder that "
              f"holds one folder per learner, {Path(args.homes).resolve().parent} here (and --only "
              f"{Path(args.homes).resolve().name} for that learner alone); nothing was graded", file=sys.stderr)
        return 2
    for option, path in (("--csv", args.csv), ("--json", args.json)):
        if path and (why := output_problem(option, path)):
            print(f"roster: {why}; nothing was graded", file=sys.stderr)
            return 2
    try:
        seen = scan(Path(args.homes), args.subdir)
    except PermissionError as e:
        print(f"roster: --homes {args.homes}: this account cannot read {e.filename}: {_read_advice()}; nothing was "
              "graded", file=sys.stderr)
        return 2
    found, blocked = learners(args.homes, args.subdir, seen), unreadable(args.homes, args.subdir, seen)
    if args.only:
        wrong = unknown_learners(args.homes, args.subdir, args.only, found, blocked)
        if wrong:
            print("roster: " + "\n        ".join(wrong) + "\n        nothing was graded: fix --only and run it again",
                  file=sys.stderr)
            return 2
        found = {k: v for k, v in found.items() if k in args.only}
        blocked = {k: v for k, v in blocked.items() if k in args.only}
    elif not found and not blocked:     # no learner at all: the command line names the wrong folders
        print(no_learner(args.homes, args.subdir, seen), file=sys.stderr)
        return 2
    elif (left := without_labs(args.homes, args.subdir, seen)):
        print(f"roster: note: no row for {', '.join(left)}: no {args.subdir} in their folder (a server never "
              "started, or not a learner)", file=sys.stderr)
    if blocked:         # nothing to grade at all is a setup problem (2); some learners unread are error rows (1)
        print(unread_note(blocked, every=not found), file=sys.stderr)
        if not found:
            return 2
    unread = [unread_doc(name, folder) for name, folder in blocked.items()]
    if os.geteuid() != 0:
        print("roster: note: grading runs as this user, so learners' code runs with its rights; run as root "
              "to grade each learner as themselves", file=sys.stderr)
    elif args.as_me:
        print("roster: note: --as-me: grading runs as root, so learners' code runs with root's rights (it can read "
              "and change any learner's files and grades); leave out --as-me to grade each learner as the owner "
              "of their labs folder", file=sys.stderr)
    if not args.solutions:      # found once, before any grading: outside a checkout, say how to name it
        from .coursedir import CourseNotFound
        try:
            args.solutions = str(find_course() / "solutions")
        except CourseNotFound as e:
            print(f"roster: {str(e).split(': run from')[0]}: run the roster from the checkout, or pass "
                  "--solutions <checkout>/solutions (or set FEEDBEAST_COURSE=<checkout>)", file=sys.stderr)
            return 2
    if not Path(args.solutions).is_dir():
        print(f"roster: --solutions {args.solutions} is not a folder: give the course checkout's solutions/",
              file=sys.stderr)
        return 2
    args.solutions = str(Path(args.solutions).resolve())     # each learner is graded in a folder of its own
    if why := course_in_homes(args.solutions, args.homes):
        print(f"roster: {why}", file=sys.stderr)
        return 2
    course = course_labs(args.solutions)
    devices, source = (split(args.gpus), "--gpus") if args.gpus is not None else in_reach()
    if (devices or source == "--gpus") and (why := gpus_problem(devices, source)):
        print(f"roster: {why}; nothing was graded", file=sys.stderr)
        return 2
    if args.labs and (why := unknown_labs(args.labs, Path(args.solutions))):
        print(f"roster: {why}", file=sys.stderr)
        return 2
    for path in filter(None, (args.csv, args.json)):
        if kept := keep_previous(path):
            print(f"roster: kept the previous {Path(path).name} as {kept}")
    from .grade import _has_gpu
    # said before an hour of grading, not found later in a column of 100s. With --gpus the gradings see those GPUs,
    # not this process's CUDA_VISIBLE_DEVICES: then what nvidia-smi lists says whether there are any
    if source == "--gpus" and (note := unchecked(devices, source)):
        print(f"roster: note: {note}", file=sys.stderr)
    no_gpu = not (listed() if source == "--gpus" else _has_gpu())
    if no_gpu:
        print("roster: no GPU in reach here: every launch is skipped, so a lab with the right SASS and wrong numbers "
              "grades partial and scores 100, as a solved one does; grade on the room's GPUs for ok",
              file=sys.stderr)
    slots = Slots(devices, args.jobs)
    # which GPUs, and why those: a wrong CUDA_VISIBLE_DEVICES shows here (not devices --gpus named that nvidia-smi
    # could not check, and no GPU listed: the note above said so)
    if slots.devices and not (no_gpu and source == "--gpus"):
        used = slots.used(args.jobs)
        print(f"roster: {_count(max(1, args.jobs), 'grading')} at once on GPU {', '.join(used)} (from {source})"
              + (f" ({-(-max(1, args.jobs) // len(used))} at most on each)" if args.jobs > len(used) > 1 else "")
              + (f"; --jobs {len(slots.devices)} would use all {len(slots.devices)}" if len(used) < len(slots.devices)
                 else ""), file=sys.stderr)
    if args.watch:
        return watch(args, found, slots, unread)

    def one(item):
        with slots.one() as device:
            return grade_learner(item[0], item[1], args.labs, args.timeout, solutions=args.solutions,
                                 as_owner=not args.as_me, hazards=args.hazards, device=device)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = {}
        futures = [pool.submit(one, item) for item in found.items()]
        for future in concurrent.futures.as_completed(futures):     # each learner's line as they are graded
            doc = done[id(future)] = future.result()
            _say(screen_line(doc, f"GPU {doc['device']}, " if len(slots.devices) > 1 and "device" in doc else ""))
        docs = sorted([done[id(f)] for f in futures] + unread, key=lambda d: d["learner"])
    for line in hints(docs):
        print(line, file=sys.stderr)

    fill_unread(docs, args.labs or columns([d for d in docs if not d.get("unread")], course))

    def write():
        if args.json:
            write_private(args.json, json.dumps(docs, indent=1) + "\n")
        return write_csv(docs, args.csv, args.labs or None, course)
    write()       # the grades first: stopped while the labs as given are graded, the run loses none of them
    if baseline_labs(docs):
        print(f"roster: wrote {args.csv}: scores before the labs as given are graded (a run stopped now keeps "
              "these)", file=sys.stderr)
    # what the labs as given pass here earns a failed lab nothing: graded once, for the labs some learner failed
    if left := with_baseline(docs, baseline_of(args, slots)):
        print(_baseline_note(left), file=sys.stderr)
    cols = write()
    print(f"wrote {args.csv}{f' and {args.json}' if args.json else ''}: {_count(len(docs), 'learner')} x labs "
          f"{', '.join(cols)}")
    ungraded = not_graded(docs)
    if ungraded:        # the exit status says it; this line says whose and where the why is
        print(f"roster: exit 1: not every lab handed in was graded ({_count(len(ungraded), 'learner')}: "
              + ", ".join(ungraded[:8]) + (", ..." if len(ungraded) > 8 else "")
              + f"): their rows in {args.csv} say error, and why (first failing check); the others' grades stand",
              file=sys.stderr)
    return 1 if ungraded else 0


if __name__ == "__main__":
    sys.exit(main())
