"""`make book`: the readable edition. Every chapter as HTML with its saved outputs, and an index.

    python book/build.py [--out _book] [--root .]

Each chapters/NN-*.ipynb becomes chapters/NN-*.html with nbconvert's `lab` template (no network
needed: the template ships inside the nbconvert wheel). Links between chapters are rewritten from
.ipynb to .html; a relative link to any other file of the repository (a lab, results/<gpu>/results.md)
is kept and the file copied beside the pages, so the output folder can be served or zipped as is.
Then every relative link and #anchor in the output is checked: a broken one fails the build.
The formulas need MathJax: its files come from the jupyter-server-mathjax wheel (requirements/book.txt) into
mathjax/ beside the pages, so the book reads offline; without that package the pages load it from nbconvert's CDN.
The page list and title come from book/book.json; chapters are found by the glob there.
"""
from __future__ import annotations

import argparse
import importlib.util
import html
import os
import re
import shlex
import shutil
import sys
import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent


class _Links(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script", "source"):
                self.links.append(a[key])


def _parse(page: Path) -> _Links:
    p = _Links()
    p.feed(page.read_text(encoding="utf-8"))
    return p


def _is_local(url: str) -> bool:
    s = urlsplit(url)
    return not (s.scheme or s.netloc or url.startswith("//"))


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


_HREF = re.compile(r'(?P<attr>\b(?:href|src))="(?P<url>[^"]*)"')


def _rewrite(page_html: str, page_rel: Path, root: Path, out: Path, built: set) -> str:
    """.ipynb links to built chapters -> .html; other repository files are copied into `out`."""
    def fix(m):
        url = html.unescape(m["url"])
        if not url or not _is_local(url) or url.startswith("#"):
            return m.group(0)
        s = urlsplit(url)
        target = (page_rel.parent / unquote(s.path))
        try:
            norm = (root / target).resolve().relative_to(root.resolve())
        except ValueError:
            return m.group(0)          # points outside the repository: left for the checker
        if norm.as_posix() in built:
            new = s.path[: -len(".ipynb")] + ".html"
            url = new + (f"#{s.fragment}" if s.fragment else "")
        elif (root / norm).exists():
            dest = out / norm
            if (root / norm).is_dir():
                shutil.copytree(root / norm, dest, dirs_exist_ok=True)
            elif not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / norm, dest)
        return f'{m["attr"]}="{html.escape(url, quote=True)}"'
    return _HREF.sub(fix, page_html)


def check_links(out: Path) -> list[str]:
    """Every relative href/src in the HTML under `out` resolves to a file there (and its #anchor)."""
    pages = {p: _parse(p) for p in out.rglob("*.html")}
    broken = []
    for page, parsed in pages.items():
        for url in parsed.links:
            if not _is_local(url) or url.startswith("data:"):
                continue
            s = urlsplit(url)
            target = (page.parent / unquote(s.path)).resolve() if s.path else page.resolve()
            where = f"{page.relative_to(out)}: {url}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
                continue
            if target.is_dir() and not (target / "index.html").exists() and not any(target.iterdir()):
                broken.append(f"{where} (an empty folder)")
                continue
            if s.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if s.fragment not in ids and unquote(s.fragment) not in ids:
                    broken.append(f"{where} (no anchor #{s.fragment} in {target.name})")
    return broken


# The configuration nbconvert's default URL asks for, in the name MathJax 2.7's own files give it.
MATHJAX_CONFIG = "?config=TeX-AMS-MML_HTMLorMML-full,Safe"


def _local_mathjax(out: Path) -> Path | None:
    """MathJax 2.7 from the jupyter-server-mathjax package, copied to out/mathjax/; None without the package."""
    import importlib.util
    spec = importlib.util.find_spec("jupyter_server_mathjax")   # its files only: the server extension is not needed
    if spec is None:
        return None
    static = Path(spec.origin).parent / "static"
    shutil.copytree(static, out / "mathjax", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return out / "mathjax" / "MathJax.js"


def build(root: Path, out: Path) -> list[Path]:
    import nbformat
    from nbconvert import HTMLExporter

    cfg = json.loads((HERE / "book.json").read_text())
    root = root.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    chapters = sorted(p for pattern in cfg["chapters"] for p in root.glob(pattern))
    built = {p.relative_to(root).as_posix() for p in chapters}
    exporter = HTMLExporter(template_name=cfg.get("template", "lab"))
    mathjax = _local_mathjax(out)
    entries, pages = [], []
    for path in chapters:
        nb = nbformat.read(path, as_version=4)
        rel = path.relative_to(root)
        page = out / rel.with_suffix(".html")
        if mathjax:      # relative to the page, so the folder can be moved, zipped or served as is
            exporter.mathjax_url = Path(os.path.relpath(mathjax, page.parent)).as_posix() + MATHJAX_CONFIG
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": _title(nb) or path.stem}})
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(_rewrite(body, rel, root, out, built), encoding="utf-8")
        has_outputs = any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
        entries.append((rel.with_suffix(".html").as_posix(), _title(nb) or path.stem, has_outputs))
        pages.append(page)
    _index(cfg, root, out, entries, built)
    return pages


def _index(cfg, root: Path, out: Path, entries, built):
    from nbconvert.filters.markdown import markdown2html_mistune
    intro = markdown2html_mistune((HERE / cfg.get("intro", "index.md")).read_text())
    rows = "\n".join(
        f'<li><a href="{html.escape(href)}">{html.escape(title)}</a>'
        f'{"" if has else " <small>(saved without outputs: run it, or see the GPU edition)</small>"}</li>'
        for href, title, has in entries)
    lab_files = sorted(p.relative_to(root).as_posix() for pattern in cfg.get("labs", [])
                       for p in root.glob(pattern))
    labs = ("<h2>Labs</h2>\n<p>Notebooks to download and run (<code>make lab</code>):</p>\n<ul>\n"
            + "\n".join(f'<li><a href="{html.escape(f)}">{html.escape(Path(f).name)}</a></li>' for f in lab_files)
            + "\n</ul>\n") if lab_files else ""
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(cfg['title'])}</title>"
            "<style>body{max-width:46em;margin:2em auto;padding:0 1em;font:16px/1.5 system-ui,sans-serif}"
            "li{margin:.3em 0}</style></head>\n"
            f"<body><h1>{html.escape(cfg['title'])}</h1>\n{intro}\n<h2>Chapters</h2>\n<ol start=\"0\">\n{rows}\n"
            "</ol>\n" + labs + "</body></html>\n")
    (out / "index.html").write_text(_rewrite(page, Path("index.html"), root, out, built), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="_book", help="output folder (replaced), default _book/")
    ap.add_argument("--root", default=str(HERE.parent), help="the repository root")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("nbconvert") is None:
        print(f"make book: nbconvert is not installed in {sys.executable}: {shlex.quote(sys.executable)} -m pip "
              f"install -r {shlex.quote(str(HERE.parent / 'requirements' / 'book.txt'))} installs it (offline: make book "
              "ENV=current WHEELS=dir, with the full bundle of make wheelhouse; a notebook bundle has no nbconvert)",
              file=sys.stderr)
        return 1
    out = Path(args.out)
    pages = build(Path(args.root), out)
    broken = check_links(out)
    for b in broken:
        print("broken link:", b)
    print(f"book: {len(pages)} chapters in {out}/index.html; {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
