"""docs/benchmarks.md's tables, generated from the results files so that the text cannot drift from the data.

    python bench/tables.py [--check]

Every table in docs/benchmarks.md sits right after a marker line
``<!-- table: NAME col1,col2,... -->``: this script replaces the fenced block that follows it with
the rows of ``docs/results/NAME.json`` in those columns, and a last line saying which commit,
machine and model (hash) the figures came from and whether the code has changed since: the
package and the benches (:data:`common.CODE_PATHS`) at that commit against ``HEAD``, so a table
measured on older code says so until it is measured again. ``--check`` changes nothing and exits
1 when the document and the results disagree (the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import CODE_PATHS, format_table, git  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"^<!-- table: (?P<name>[\w.-]+) (?P<columns>[\w,]+) -->\n```\n.*?```\n", re.M | re.S)


def code_status(commit: str | None) -> str:
    """Whether the code a bench ran is today's: ``current code`` when nothing under
    :data:`CODE_PATHS` differs between its commit and ``HEAD``."""
    if not commit:
        return "code unknown"
    if commit.endswith("+dirty"):
        return "uncommitted code"
    if not git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"):
        return "commit not in this history"
    changed = git("diff", "--name-only", commit, "HEAD", "--", *CODE_PATHS).splitlines()
    return f"code changed since ({len(changed)} files)" if changed else "current code"


def provenance(meta: dict) -> str:
    """Where a results file's figures come from, in one line."""
    commit = meta.get("commit")
    models = meta.get("models")
    model_text = ", ".join(f"{name} {digest}" for name, digest in models.items()) if models else (
        "no model" if models == {} else "model hash not recorded")
    return (f"# commit {commit[:7] + ('+dirty' if commit.endswith('+dirty') else '') if commit else 'not recorded'}"
            f" | {code_status(commit)} | {meta.get('machine', 'machine not recorded')} | {model_text}")


def render(name: str, columns: list[str]) -> str:
    data = json.loads((RESULTS / f"{name}.json").read_text())
    return f"```\n{format_table(data['rows'], columns)}\n{provenance(data['meta'])}\n```\n"


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
