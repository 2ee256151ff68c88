"""docs/benchmarks.md's tables, generated from the results files so that the text cannot drift from the data.

    python bench/tables.py [--check]

Every table in docs/benchmarks.md sits right after a marker line
``<!-- table: NAME col1,col2,... -->``: this script replaces the fenced block that follows it with
the rows of ``docs/results/NAME.json`` in those columns, and a last line saying which commit,
machine and model (hash) the figures came from and whether the code has changed since: the
package and the bench that wrote the file (its script and the bench modules it imports) at that
commit against ``HEAD``, so a table measured on older code says so until it is measured again. ``--check`` changes nothing and exits
1 when the document and the results disagree (the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, git  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"^<!-- table: (?P<name>[\w.-]+) (?P<columns>[\w,]+) -->\n```\n.*?```\n", re.M | re.S)


BENCH = ROOT / "bench"
LOCAL_IMPORT = re.compile(r"^\s*(?:from|import) (\w+)", re.M)


def bench_script(name: str) -> Path:
    """The bench that writes ``docs/results/NAME.json`` (``real-model`` -> real_model.py,
    ``objectives-long`` -> objectives.py run with other options)."""
    exact = BENCH / f"{name.replace('-', '_')}.py"
    return exact if exact.is_file() else BENCH / f"{name.split('-')[0]}.py"


def bench_code(script: Path) -> list[str]:
    """The package and the bench files ``script`` runs: itself and the bench modules and packages it
    imports, followed recursively (paths relative to the repository)."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in LOCAL_IMPORT.findall(path.read_text()):
            package = BENCH / module
            todo += sorted(package.glob("*.py")) if package.is_dir() else [BENCH / f"{module}.py"]
        todo = [p for p in todo if p.is_file()]
    return ["src", *sorted(str(p.relative_to(ROOT)) for p in seen)]


def code_status(commit: str | None, paths: list[str]) -> str:
    """Whether the code a bench ran is today's: ``current code`` when nothing under ``paths``
    differs between its commit and ``HEAD``."""
    if not commit:
        return "code unknown"
    if commit.endswith("+dirty"):
        return "uncommitted code"
    if not git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"):
        return "commit not in this history"
    changed = git("diff", "--name-only", commit, "HEAD", "--", *paths).splitlines()
    return f"code changed since ({len(changed)} files)" if changed else "current code"


def provenance(meta: dict, name: str) -> str:
    """Where results file ``name``'s figures come from, in one line."""
    commit = meta.get("commit")
    models = meta.get("models")
    model_text = ", ".join(f"{name} {digest}" for name, digest in models.items()) if models else (
        "no model" if models == {} else "model hash not recorded")
    return (f"# commit {commit[:7] + ('+dirty' if commit.endswith('+dirty') else '') if commit else 'not recorded'}"
            f" | {code_status(commit, bench_code(bench_script(name)))} | {meta.get('machine', 'machine not recorded')} | {model_text}")


def render(name: str, columns: list[str]) -> str:
    data = json.loads((RESULTS / f"{name}.json").read_text())
    return f"```\n{format_table(data['rows'], columns)}\n{provenance(data['meta'], name)}\n```\n"


def regenerate(text: str) -> str:
    def table(match: re.Match) -> str:
        head = match.group(0).split("\n", 1)[0]
        return f"{head}\n{render(match.group('name'), match.group('columns').split(','))}"

    return MARKER.sub(table, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is not up to date")
    args = parser.parse_args()
    text = DOC.read_text()
    new = regenerate(text)
    tables = len(MARKER.findall(text))
    if args.check:
        if new != text:
            print(f"{DOC} differs from docs/results/: run python bench/tables.py", file=sys.stderr)
            return 1
        print(f"{tables} tables match their results files")
        return 0
    DOC.write_text(new)
    current = new.count("| current code |")
    print(f"regenerated {tables} tables in {DOC}; {current} measured on the current code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
