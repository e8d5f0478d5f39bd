"""Labs are generated from solutions: solution regions are stripped, outputs cleared.

In a solution notebook, the learner's part of a code cell sits between marker lines:
    # BEGIN SOLUTION        (or // BEGIN SOLUTION in a %%cuda cell)
    ...
    # END SOLUTION
and becomes one TODO line with the same indentation. `# BEGIN SOLUTION: what to write` puts that text in the
TODO line (`# TODO: your code here: what to write`), which the checks quote while it is there. A line
`# LAB: code` inside the region is given to the learner as `code` (a starting value that lets the lab run as
given: `// LAB: const int use = 0;`), ending in a comment that says to delete it once theirs is written (kept, it
would still run beside their code); in the solution it is a comment. A cell tagged `solution-only` is dropped.

    python -m feedbeast.course.labs build solutions labs    # write labs/, backing up edited ones
    python -m feedbeast.course.labs check solutions labs    # exit 1 if labs/ is stale (or edited)
    python -m feedbeast.course.labs reset solutions labs    # restore labs/, backing up edited ones
    python -m feedbeast.course.labs reset solutions labs 04 # only lab 04 (a number, a name or a lab's path; several)
    python -m feedbeast.course.labs find solutions labs 04  # the lab files that 04 names (make grade LAB=04)
"""
from __future__ import annotations

import copy
import datetime
import os
import pwd
import re
import shutil
import sys
from pathlib import Path

import nbformat

from ..errors import STARTER_MARK
from .exit_status import NOTHING_RAN

BEGIN = re.compile(r"^(?P<indent>\s*)(?P<c>#|//) BEGIN SOLUTION(?::\s*(?P<what>\S.*?))?\s*$")
END = re.compile(r"^\s*(#|//) END SOLUTION\s*$")
LAB_LINE = re.compile(r"^(?P<indent>\s*)(#|//) LAB: (?P<code>.*)$")
TODO = "TODO: your code here"   # what marks the learner's part in a lab (feedbeast.errors.unwritten finds it)


def _todo_line(m: re.Match) -> str:
    """The TODO line a BEGIN SOLUTION line becomes."""
    what = f": {m['what']}" if m["what"] else " (see the hints below)"
    return f"{m['indent']}{m['c']} {TODO}{what}"


def _given(code: str, c: str, cuda: bool) -> str:
    """A LAB line's code as the lab gives it: a line of code ends in the starter mark (comment char `c`)."""
    return code if is_note(code, cuda) else f"{code}  {c} {STARTER_MARK}"


def strip_source(src: str) -> str:
    out, inside = [], False
    for line in src.splitlines():
        m = BEGIN.match(line)
        if m and not inside:
            inside = True
            out.append(_todo_line(m))
            continue
        if END.match(line):
            if not inside:
                raise ValueError("END SOLUTION without BEGIN SOLUTION")
            inside = False
            continue
        if inside and (given := LAB_LINE.match(line)):
            out.append(f"{given['indent']}{_given(given['code'], given[2], src.startswith('%%cuda'))}")
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def is_note(line: str, cuda: bool) -> bool:
    """A line that writes no code: blank, a comment (// in a %%cuda cell, # in Python, where # in CUDA is a
    directive), or Python's `pass`."""
    line = line.strip()
    return not line or line.startswith("//" if cuda else "#") or (not cuda and line == "pass")


def given_parts(src: str) -> list[tuple[str, tuple[str, ...], str]]:
    """What the lab hands out in place of each solution region of a cell, each line stripped of its indentation:
    (the TODO line, the LAB lines given under it, the first line of code after the region, '' at the end of the
    cell). A learner's cell that holds the TODO line with only these under it has that part not written."""
    lines, out, inside, todo, given = src.splitlines(), [], False, "", []
    cuda = src.startswith("%%cuda")
    for k, line in enumerate(lines):
        m = BEGIN.match(line)
        if m and not inside:
            inside, todo, given = True, _todo_line(m).strip(), []
        elif inside and END.match(line):
            inside = False
            after = next((x for x in lines[k + 1:] if BEGIN.match(x) or not is_note(x, cuda)), "")
            out.append((todo, tuple(given), _todo_line(BEGIN.match(after)).strip() if BEGIN.match(after)
                        else after.strip()))
        elif inside and (g := LAB_LINE.match(line)) and not is_note(g["code"], cuda):
            # (a given `pass` is read as the learner's lines are: no code)
            given.append(_given(g["code"].strip(), g[2], cuda))
    return out


def make_lab(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    lab = copy.deepcopy(solution)
    cells = []
    for cell in lab.cells:
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = strip_source(cell.source)
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    lab.cells = cells
    return lab


def _render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def lab_text(solution_path: Path) -> str:
    return _render(make_lab(nbformat.read(solution_path, as_version=4)))


def pairs(solutions: Path, labs: Path):
    for sol in sorted(Path(solutions).glob("*.ipynb")):
        yield sol, Path(labs) / sol.name


def build(solutions, labs):
    """Write every lab from its solution; an edited lab is kept in labs/backup/ first (see restore)."""
    Path(labs).mkdir(exist_ok=True)
    stamp = _stamp()
    for sol, lab in pairs(solutions, labs):
        restore(sol, lab, stamp, said="wrote")


def edited(lab: Path, fresh: str) -> bool:
    """Whether `lab` holds something the generated lab does not: the learner's work (or a lab of older
    solutions). build and reset both back such a lab up before replacing it."""
    return lab.exists() and lab.read_bytes() != fresh.encode()   # bytes: a file cut short mid-character is edited too


def stale(solutions, labs) -> list[str]:
    return [str(lab) for sol, lab in pairs(solutions, labs) if not lab.exists() or edited(lab, lab_text(sol))]


def select(solutions, labs, which) -> list[tuple[Path, Path]]:
    """The (solution, lab) pairs that `which` names: lab numbers ("4", "04", "lab04", "04.ipynb"), names with or
    without their number and .ipynb ("04-mbarrier-ring", "mbarrier-ring"), whole words of one lab's name
    ("mbarrier"), or paths of labs in `labs`; all when `which` is empty. A name that matches no lab is a ValueError
    listing the labs there are; so is a path into another folder (solutions/04-....ipynb is that file, not lab 04 of
    `labs`)."""
    every = list(pairs(solutions, labs))
    if not which:
        return every
    chosen = []
    for w in which:
        if elsewhere(labs, w):     # a path names that file, never the lab of the same name in labs/
            raise ValueError(f"{w} is {'not in' if Path(w).exists() else 'no file, and not in'} {labs}/, the "
                             f"folder whose labs this restores: name the lab by its number ({_example(w)}) or its "
                             f"path in {labs}/")
        name = Path(w).name
        bare = name.removesuffix(".ipynb")
        # a number as the labs' titles write it, or with the file's suffix: lab03, Lab 3, lab-03, 03.ipynb
        if m := re.fullmatch(r"(?:lab[-_ ]?)?(\d{1,2})", bare, re.I):
            bare = m[1]
        hits = [(s, l) for s, l in every        # 04-mbarrier-ring(.ipynb), mbarrier-ring, 4 or 04
                if bare == l.stem or bare == l.stem.split("-", 1)[-1] or l.name.split("-", 1)[0] == bare.zfill(2)]
        if not hits and not bare.isdigit():     # a part of a name ("mbarrier", "tma-ring") that one lab alone has
            hits = [(s, l) for s, l in every if f"-{bare}-" in f"-{l.stem.split('-', 1)[-1]}-"]
            if len(hits) > 1:
                raise ValueError(f"{w!r} is part of several labs' names ({', '.join(l.name for _, l in hits)}): "
                                 f"name one by its number or its whole name")
        if not hits:
            raise ValueError(f"no lab {w!r}: the labs are {', '.join(l.name for _, l in every)}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def elsewhere(labs, w: str) -> bool:
    """Whether `w` is a path with a folder other than `labs` (solutions/04-....ipynb, /tmp/04-....ipynb): it names
    that file, not the lab of its name."""
    return Path(w).parent != Path(".") and Path(w).parent.resolve() != Path(labs).resolve()


def _example(w: str) -> str:
    n = re.match(r"(\d\d)-", Path(w).name)
    return n[1] if n else "04"


def on_disk(labs, lab: Path) -> list[Path]:
    """The notebooks of `lab`'s number in labs/ as the learner left them: the lab's own file first (when it is
    there), then its copies and renamed versions (Jupyter's Duplicate writes 04-mbarrier-ring-Copy1.ipynb). A lab
    named by its number or name is graded in each of them, as `grade labs/04-*.ipynb` would."""
    prefix = Path(lab).name.split("-", 1)[0] + "-"
    others = sorted(p for p in Path(labs).glob(prefix + "*.ipynb") if p.name != Path(lab).name)
    return ([Path(lab)] if Path(lab).exists() else []) + others


def none_left(labs, lab: Path) -> str:
    """What to say when no notebook of `lab`'s number is left in labs/: a notebook there that no lab's number
    names (renamed in Jupyter: copy.ipynb) may be it, so it is named before the reset that would write a fresh lab."""
    n = Path(lab).name[:2]
    unnamed = sorted(p.name for p in Path(labs).glob("*.ipynb") if not re.match(r"\d\d-", p.name))
    maybe = (f"; {', '.join(unnamed)} in {labs} {'has' if len(unnamed) == 1 else 'have'} no lab's number: if one is "
             f"your lab {n}, rename it {Path(lab).name}" if unnamed else "")
    return (f"no notebook of lab {n} in {labs} (not {Path(lab).name}, nor a copy of it){maybe}; "
            f"make reset-labs LAB={n} writes the lab again")


def roster_note(lab: Path, found: list[Path]) -> str:
    """What to know when a lab has several notebooks: which one a workshop's roster grades."""
    counted = Path(lab).name if Path(lab) in found else None
    return (f"lab {Path(lab).name[:2]}: grading {', '.join(p.name for p in found)}; a workshop's roster grades "
            + (f"{counted} only (the lab's own name)" if counted else
               "none of them (several notebooks, none with the lab's own name): keep one, named as in labs/"))


class NotKept(Exception):
    """An edited lab could not be backed up: it is left as it is, and the message says what to do."""


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _not_writable(lab: Path, what: Path, e: OSError) -> NotKept:
    """The message for a backup folder (or a lab) this user cannot write, e.g. one a reset run with sudo left
    to root: whose it is and what to run, the learner's lab untouched."""
    me = _name(os.geteuid())
    whose = f"it belongs to {_name(what.stat().st_uid)}" if what.exists() else e.strerror
    fix = (f"Move it aside (mv {what} {what}.old) and run this again, or ask an instructor for "
           f"`sudo chown -R {me} {what}`" if what.name == "backup" else
           f"Ask an instructor for `sudo chown {me} {what}`, then run this again")
    return NotKept(f"{what} is not writable by {me} ({whose}; a reset run with sudo leaves it so): {lab.name} was "
                   f"not restored and is as you left it. {fix}.")


def keep(lab: Path, stamp: str) -> Path:
    """Copy `lab` to labs/backup/<name>.<stamp>.ipynb; NotKept when that folder cannot be written."""
    folder = lab.parent / "backup"
    backup = folder / f"{lab.stem}.{stamp}.ipynb"
    n = 1
    while backup.exists():       # a second reset in the same second keeps both versions
        n += 1
        backup = folder / f"{lab.stem}.{stamp}-{n}.ipynb"
    try:
        folder.mkdir(exist_ok=True)
        shutil.copy2(lab, backup)
    except PermissionError as e:
        raise _not_writable(lab, folder, e) from None
    return backup


def restore(sol: Path, lab: Path, stamp: str, said: str = "restored"):
    """Write the lab of `sol` to `lab`, after keeping an edited `lab` in labs/backup/ (nothing is lost)."""
    fresh = lab_text(sol)
    if edited(lab, fresh):
        print(f"kept your version of {lab.name} as {keep(lab, stamp)}")
    try:
        lab.write_text(fresh, encoding="utf-8")
    except PermissionError as e:
        raise _not_writable(lab, lab, e) from None
    print(f"{said} {lab}")


def reset(solutions, labs, which=()):
    """Restore each lab (or those `which` names, see select); a lab that differs from the generated one is copied
    to labs/backup/ first."""
    stamp = _stamp()
    for sol, lab in select(solutions, labs, which):
        restore(sol, lab, stamp)


def main(argv=None):
    argv = argv or sys.argv[1:]
    if len(argv) < 3 or argv[0] not in ("build", "check", "reset", "find") or (len(argv) > 3 and argv[0] not in
                                                                                ("reset", "find")):
        print(__doc__)
        return 2
    cmd, solutions, labs, which = argv[0], argv[1], argv[2], argv[3:]
    for folder in (solutions, labs):
        if not Path(folder).is_dir():
            print(f"{folder} is not a folder: give the solutions and labs folders first "
                  f"(python -m feedbeast.course.labs {cmd} solutions labs{' 04' if cmd == 'reset' else ''})")
            return 2
    if cmd == "build":
        try:
            build(solutions, labs)
        except NotKept as e:
            print(e)
            return 1
    elif cmd == "find":
        # a notebook's path outside labs/ (solutions/04-....ipynb, the shell's expansion of a pattern) is graded as
        # it is; one that does not exist is no lab's
        given = [w for w in which if elsewhere(labs, w) and Path(w).is_file()]
        missing = [w for w in which if elsewhere(labs, w) and not Path(w).is_file()]
        if missing:
            print(f"no such file: {', '.join(missing)} (name a lab by its number, LAB={_example(missing[0])}, or "
                  f"give the path of a notebook that exists)", file=sys.stderr)
            return 2
        rest = [w for w in which if w not in given]
        try:
            chosen = select(solutions, labs, rest) if rest or not which else []
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        if given:
            print(*given, sep="\n")
        by_path = {lab for w in rest if "/" in w for _, lab in select(solutions, labs, [w])}
        for _, lab in chosen:
            found = [lab] if lab in by_path or not rest else on_disk(labs, lab)
            if not found:
                print(none_left(labs, lab), file=sys.stderr)
                return 2
            if len(found) > 1:
                print(roster_note(lab, found), file=sys.stderr)
            print(*map(str, found), sep="\n")
    elif cmd == "reset":
        try:
            reset(solutions, labs, which)
        except ValueError as e:      # no such lab (the message lists those there are): as grade says of one
            print(f"{e} (nothing was restored)")
            return NOTHING_RAN
        except NotKept as e:
            print(e)
            return 1
    else:
        s = stale(solutions, labs)
        if s:
            # a learner's worked lab differs too: point at the reset of one lab, which keeps their version
            print("stale labs (each differs from what solutions/ gives; a lab you worked on does too):", *s,
                  sep="\n  ")
            print("make reset-labs LAB=NN starts one lab again, make labs every lab; either keeps each edited lab "
                  "in labs/backup/ first")
            return 1
        print("labs are in sync with solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
