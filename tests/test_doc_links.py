"""Every repository path and relative link in README.md and docs/*.md exists, and none leaves the repository.

Checked: Markdown links `[text](target)` that are not URLs or bare anchors (resolved from the page's folder), and
code spans that name a repository path (`rooflinesim/cli/`, `tests/test_layers.py`, ...: a span starting with a
top-level folder or file of the repository and holding no placeholder such as `<device>`, `*` or `{a,b}`, resolved
from the repository root).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PLACEHOLDER = re.compile(r"[<>*{}$\[\]|]|\.\.\.")


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the page's links and repository paths, one line each."""
    text = _without_code_blocks(page.read_text(encoding="utf-8"))
    found = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:, ...) or an anchor on the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if root.resolve() not in (path, *path.parents):
            found.append(f"{page.name}: link {target!r} leaves the repository")
        elif not path.exists():
            found.append(f"{page.name}: link {target!r} points to nothing")
    tops = {p.name for p in root.iterdir() if not p.name.startswith(".")}
    for match in CODE_SPAN.finditer(text):
        span = match.group(1).strip()
        if " " in span or PLACEHOLDER.search(span) or "/" not in span:
            continue
        if span.startswith("../"):  # a path relative to the page: it may climb out of the repository
            if root.resolve() not in (page.parent / span).resolve().parents:
                found.append(f"{page.name}: path `{span}` leaves the repository")
            continue
        if span.split("/", 1)[0] not in tops:
            continue
        path = (root / span.split("#", 1)[0].split("::", 1)[0]).resolve()
        if not path.exists():
            found.append(f"{page.name}: repository path `{span}` does not exist")
    return found


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_docs_links_and_paths_exist(page):
    assert not problems(page), "\n".join(problems(page))


def test_readme_links_and_paths_exist():
    assert not problems(ROOT / "README.md"), "\n".join(problems(ROOT / "README.md"))


def test_readme_is_a_front_door():
    """The README stays a front door (the manual is docs/): at most 200 lines, the two quick-start commands, and a
    link to every page of docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "pip install . && rooflinesim predict" in text and "bash scripts/setup-dev.sh && python3 -m pytest -q" in text
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in text]
    assert not missing, f"README links no docs page {missing}"


def test_docs_exist():
    assert (ROOT / "docs" / "contributing.md").is_file()


def test_the_checker_finds_broken_and_escaping_links(tmp_path):
    """The checker itself, on a page in a made-up repository: each kind of problem is reported, good ones are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "real.py").write_text("")
    page = tmp_path / "docs" / "page.md"
    page.write_text("[ok](../src/real.py) [anchor](#x) [web](https://example.org) [gone](missing.md)\n"
                    "[out](../../elsewhere/file.md) `src/real.py` `src/stale.py` `src/<name>.py` `not a path`\n"
                    "`../src/real.py` `../../shared/notes.md`\n"
                    "```\n[in a code block](nowhere.md) `src/also-stale.py`\n```\n")
    found = problems(page, tmp_path)
    assert len(found) == 4, found
    assert any("missing.md" in f and "points to nothing" in f for f in found)
    assert any("elsewhere" in f and "leaves the repository" in f for f in found)
    assert any("src/stale.py" in f for f in found)
    assert any("shared/notes.md" in f and "leaves the repository" in f for f in found)
