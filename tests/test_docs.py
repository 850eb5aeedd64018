"""The README and docs/ stay true: every `gpuprof ...` line names a command and options that
exist, every link between pages resolves (anchors included), no install line fetches the
unrelated `gpuprof` from an index, and the README stays short."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from gpuprof.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INSTALL_PLACES = [
    *PAGES,
    *sorted((ROOT / "examples").rglob("*")),
    *sorted((ROOT / "scripts").rglob("*")),
]
FENCE = re.compile(r"^```.*?\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`(gpuprof [^`\n]+)`")  # on one line (a span across lines is prose)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _command_lines(text: str) -> list[str]:
    """Every gpuprof command line: in code blocks (continuations joined, comments cut) and in
    inline code spans."""
    found = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("gpuprof ") or line == "gpuprof":
                found.append(line.split(" #")[0].strip())
    found += [m for m in SPAN.findall(text) if "..." not in m and "<" not in m]
    return found


def _check(line: str) -> str | None:
    """None when the line's command and options exist, else what is wrong."""
    args = shlex.split(line)[1:]
    ctx = click.Context(cli, info_name="gpuprof")
    command: click.Command = cli
    while isinstance(command, click.Group) and args:
        if args[0].startswith("-"):
            if args[0] in ("--help", "-h", "--version", "--debug"):
                return None
            return f"option {args[0]} before a command"
        sub = command.get_command(ctx, args[0])
        if sub is None:
            return f"no command {args[0]!r}"
        ctx = click.Context(sub, info_name=args[0], parent=ctx)
        command, args = sub, args[1:]
    parser = command.make_parser(ctx)
    try:
        parser.parse_args(args=[a for a in args if a != "--debug"])
    except click.UsageError as exc:
        return exc.format_message()
    return None


def test_every_gpuprof_line_in_the_docs_parses() -> None:
    checked, wrong = 0, []
    for page in PAGES:
        for line in _command_lines(page.read_text(encoding="utf-8")):
            checked += 1
            problem = _check(line)
            if problem and "requires an argument" in problem and not line.endswith(" "):
                # prose names an option without its value (`gpuprof check --reference-python`)
                problem = None if f"`{line}`" in page.read_text(encoding="utf-8") else problem
            if problem:
                wrong.append(f"{page.relative_to(ROOT)}: {line!r}: {problem}")
    assert checked > 50
    assert not wrong, "\n".join(wrong)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_link_between_pages_resolves() -> None:
    broken = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


BARE_INSTALL = re.compile(
    r"pip3? install(?:\s+-{1,2}[\w-]+(?:[ =]\S+)?)*\s+['\"]?gpuprof(?![\w.-]|\s*@)"
)


@pytest.mark.parametrize(
    ("line", "bare"),
    [
        ("pip install gpuprof", True),
        ("pip install -U gpuprof", True),
        ("pip install -c keep-torch.txt .", False),
        ('pip install "gpuprof-cluster @ git+https://example.org/x"', False),
        ("pip install dist/gpuprof_cluster-0.1.0-py3-none-any.whl", False),
    ],
)
def test_the_install_scan_knows_a_bare_name(line: str, bare: bool) -> None:
    assert bool(BARE_INSTALL.search(line)) is bare


def test_no_install_line_fetches_the_unrelated_gpuprof() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in INSTALL_PLACES
        if path.is_file() and path.suffix in (".md", ".yml", ".yaml", ".sh", ".sbatch", ".txt", "")
        for m in BARE_INSTALL.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "\n".join(found)


def test_the_readme_is_short_and_the_cluster_comes_right_after_the_quick_start() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 16 * 1024
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:2] == ["Quick start", "On a cluster"]
    assert "make sweep" in text and "make test" in text
