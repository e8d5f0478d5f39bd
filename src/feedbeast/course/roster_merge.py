"""One grade sheet for a room spread over several servers: the roster's --json files merged into one CSV.

    python -m feedbeast roster merge --csv room.csv --json room.json server-a.json server-b.json

Each input is the `--json` file of one roster run (one server). A learner is known by their username: the same
name in several files is taken as one person, so give each learner one name on every server. For each lab the
merge keeps the best grade any server gave it: ok before partial before failed before not started, then the higher
score; a lab graded on one server wins over the same lab handed in but not graded (`error`) on another. One notebook
(the same sha256) that failed on one server and not on another keeps its failure, and the merge says so: a check
that failed ran and found a fault, where a partial grade only could not run some checks (no GPU there, or an older
one), and an ok on another server is a race or a GPU that the fault does not show on. Each kept lab names the file it
came from (`"server"` in the merged JSON), and the merge prints which learners it found in more than one file.
Why a server could not grade a learner shows in their row only while a lab it left ungraded still is (the merged
JSON keeps every server's reason, in `"errors"`).
With --latest the inputs are one room graded again (a learner regraded with `roster --only` after a fix): for each
learner and lab the file given last wins, its grade better or worse than before, unless it could not grade the lab
(`error`) where an earlier file did: then the earlier grade stays, and the merge says so.
The CSV is the roster's own (`roster.write_csv`): the same columns, scores and statuses. As the roster does, the
merge checks where it writes before reading anything, and keeps an existing --csv or --json file, renamed beside it
(room.csv -> room.20261128-171500.csv).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .roster import _count, keep_previous, lab_number, note_lab, output_problem, score, write_csv, write_private

RANK = {"ok": 3, "partial": 2, "failed": 1}


class MergeError(ValueError):
    """An input that is not a roster --json file, or an output that would overwrite an input."""


def load(path) -> list[dict]:
    """The learners of one roster --json file."""
    path = Path(path)
    how = ("write one on each server with `python -m feedbeast roster --homes /home --csv grades.csv "
           "--json grades.json` and merge those")
    try:
        docs = json.loads(path.read_text())
    except FileNotFoundError:
        raise MergeError(f"{path}: no such file; {how}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MergeError(f"{path} is not a roster --json file ({e}); {how}") from None
    if not isinstance(docs, list) or not all(isinstance(d, dict) and isinstance(d.get("learner"), str)
                                             and isinstance(d.get("labs", []), list) for d in docs):
        raise MergeError(f"{path} is not a roster --json file (a list with one entry per learner); {how}")
    return docs


def _rank(lab: dict) -> tuple:
    if lab.get("setup") or lab.get("refused"):   # not graded on that server: any real grade ranks above
        return -1, -1.0
    if lab.get("untouched"):    # not started (nothing of the learner's): any grade of their own work ranks above
        return 0, -1.0
    points = score(lab)
    return RANK.get(lab.get("status"), 0), -1.0 if points is None else points


def _same_notebook_failed(lab: dict, other: dict) -> bool:
    """`lab` failed where `other`, the same notebook (its sha256), did not: the failure is what the notebook does."""
    sha = lab.get("sha256")
    return (bool(sha) and sha == other.get("sha256") and lab.get("status") == "failed" and not lab.get("setup")
            and not lab.get("refused")
            and other.get("status") in ("ok", "partial"))


def _better(lab: dict, kept: dict) -> bool:
    if _same_notebook_failed(lab, kept):
        return True
    return not _same_notebook_failed(kept, lab) and _rank(lab) > _rank(kept)


def merge(inputs: list[tuple[str, list[dict]]], said: list[str] | None = None, latest: bool = False
          ) -> tuple[list[dict], dict[str, list[str]]]:
    """(source name, learners) pairs -> the merged learners (in order of first appearance) and, for each learner,
    the sources they appear in. `said` gets a line for each notebook graded failed on one server and not on another.
    latest: a lab in a later input replaces the same lab of an earlier one (a regrade), instead of the better."""
    merged: dict[str, dict] = {}
    sources: dict[str, list[str]] = {}
    said = [] if said is None else said
    for src, docs in inputs:
        # a merge's output (room.json merged again): its notes already name their servers; decided for the whole
        # file, since a learner of it with no lab and no error shows nothing of it
        merged_file = any("errors" in d or any("server" in lab for lab in d.get("labs", [])) for d in docs)
        for d in docs:
            name = d["learner"]
            sources.setdefault(name, []).append(src)
            m = merged.setdefault(name, {"learner": name, "labs": [], "ungraded": [], "errors": []})
            for lab in d.get("labs", []):
                lab = {**lab, "server": src}
                i = next((k for k, x in enumerate(m["labs"]) if x.get("lab") == lab.get("lab")), None)
                if i is None:
                    m["labs"].append(lab)
                    continue
                kept = m["labs"][i]
                if latest:       # a regrade wins, unless that run could not grade the lab and the earlier one did
                    if (lab.get("setup") or lab.get("refused")) and not (kept.get("setup") or kept.get("refused")):
                        said.append(f"{name}: lab {lab.get('lab')} was not graded in {src}: kept the grade of "
                                    f"{kept['server']}")
                    else:
                        m["labs"][i] = lab
                    continue
                for bad, good in ((lab, kept), (kept, lab)):
                    if _same_notebook_failed(bad, good):
                        said.append(f"{name}: lab {lab.get('lab')}, the same notebook, failed in {bad['server']} and "
                                    f"was {good.get('status')} in {good['server']}: kept the failure")
                if _better(lab, kept):
                    m["labs"][i] = lab
            m["ungraded"] += d.get("ungraded", [])
            # what a server did not grade, and why (a notebook under another name, a second one of a lab): the
            # learner's row keeps each, named by its server, as the server's own row did
            m.setdefault("refused", []).extend(why if merged_file else f"{src}: {why}"
                                               for why in d.get("refused", []) if isinstance(why, str))
            # a merged file (room.json merged again) keeps every server's reason in "errors", and in "error" those
            # that still stood: only these are about the labs it left ungraded, the others about labs graded since
            shown = d.get("error", "")
            for why in d.get("errors") or ([shown] if shown else []):
                m["errors"].append((f"{src}: {why}", set(d.get("ungraded", [])) if why in shown else set()))
    out = []
    for m in merged.values():
        graded = {lab.get("lab") for lab in m["labs"]}
        m["labs"].sort(key=lambda lab: str(lab.get("lab")))
        m["ungraded"] = sorted(set(m["ungraded"]) - graded)
        # a note about a lab some server graded no longer stands (that server found its notebook), but for a second
        # notebook of a graded lab: written beside the grade, it may be where the learner's work is
        by_note: dict[str, list[str]] = {}
        for n in m.get("refused", []):
            src, _, why = n.partition(": ")
            if "another notebook of lab" in why or note_lab(why) not in graded:
                by_note.setdefault(why, []).extend(src.split(", "))
        m["refused"] = [f"{', '.join(dict.fromkeys(srcs))}: {why}" for why, srcs in by_note.items()]   # once each
        errors = m.pop("errors")
        if shown := _errors_that_stand(errors, m["ungraded"], graded):
            m["error"] = "; ".join(shown)
        if errors:          # every server's, for the record; the row shows only those that still stand
            m["errors"] = [why for why, _ in errors]
        out.append(m)
    return out, sources


def _errors_that_stand(errors: list[tuple[str, set]], ungraded: list[str], graded: set) -> list[str]:
    """The servers' errors a merged row shows: one whose lab is still ungraded (no server graded it), or any when no
    server graded a lab. A lab another server graded no longer needs the reason it was not graded on this one."""
    return [why for why, left in errors if left & set(ungraded) or not graded]


def _labs_last(argv: list[str]) -> list[str]:
    """--labs and the lab numbers after it moved to the end, so that `--labs 3 4 a.json b.json` leaves the files to
    the inputs (argparse's --labs would take every word after it)."""
    if "--labs" not in argv:
        return argv
    i = j = argv.index("--labs")
    j += 1
    while j < len(argv) and re.fullmatch(r"[0-9]{1,2}", argv[j]):
        j += 1
    return argv[:i] + argv[j:] + argv[i:j]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedbeast roster merge", description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", metavar="ROSTER_JSON", help="the --json file of each server's roster run")
    ap.add_argument("--csv", required=True, help="CSV to write (one row per learner, the roster's columns)")
    ap.add_argument("--json", default=None, help="also write the merged learners, every check, here")
    ap.add_argument("--labs", nargs="*", default=None, type=lab_number,
                    help="lab numbers to put in the CSV, 4 or 04 (default: every lab in the inputs)")
    ap.add_argument("--latest", action="store_true",
                    help="a regrade: for each learner and lab the file given last wins (default: the best grade)")
    args = ap.parse_args(_labs_last(sys.argv[1:] if argv is None else list(argv)))
    inputs = [Path(p) for p in args.inputs]
    try:
        for option, out in (("--csv", args.csv), ("--json", args.json)):
            if out and (why := output_problem(option, out)):
                raise MergeError(why)
            if out and any(Path(out).resolve() == p.resolve() for p in inputs):
                raise MergeError(f"{out} is one of the inputs: write the merged grades to another file")
        named = [(str(p), load(p)) for p in inputs]
        first: dict = {}        # every server's roster writes grades.json: one file given twice hides another
        for p in inputs:
            keys = (("path", p.resolve()), ("text", p.read_bytes()))
            if twice := next((first[k] for k in keys if k in first), None):
                raise MergeError(f"{p} is {'given twice' if twice == p else f'the same grades as {twice}'}: give "
                                 "each server's --json file once")
            first.update(dict.fromkeys(keys, p))
    except MergeError as e:
        print(f"roster merge: {e}; nothing was written", file=sys.stderr)
        return 2
    for out in filter(None, (args.csv, args.json)):     # an earlier merge's grades are kept, as the roster keeps its
        if kept := keep_previous(out):
            print(f"roster merge: kept the previous {Path(out).name} as {kept}")
    said: list[str] = []
    docs, sources = merge(named, said, latest=args.latest)
    for line in said:
        print(line)
    for name, where in sources.items():
        if len(where) > 1:
            doc = next(d for d in docs if d["learner"] == name)
            kept = ", ".join(f"lab {lab['lab']} from {lab['server']}" for lab in doc["labs"])
            print(f"{name}: in {', '.join(where)}; kept {kept or 'no graded lab'}")
    cols = write_csv(docs, args.csv, sorted(set(args.labs)) if args.labs else None)
    if args.json:
        write_private(args.json, json.dumps(docs, indent=1) + "\n")
    print(f"wrote {args.csv}{f' and {args.json}' if args.json else ''}: {_count(len(docs), 'learner')} from "
          f"{_count(len(inputs), 'file')} x labs {', '.join(cols)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
