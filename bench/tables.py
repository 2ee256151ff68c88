"""The documents' tables (docs/*.md), generated from the results files so that the text cannot drift from the data.

    python bench/tables.py [--check]

Every generated table in docs/*.md sits right after a marker line
``<!-- table: NAME col1,col2,... -->`` (or ``NAME.KEY``: the list ``KEY`` of the file's meta; the
one column ``lines``: a list of strings as they are). This script replaces the fenced block that
follows it with the rows of ``docs/results/NAME.json`` in those columns and a last line saying
which commit, machine and model (hash) the figures came from, and whether the code has changed
since: the package and the bench that wrote the file (its script and the bench modules it
imports) at that commit against ``HEAD``, so a table measured on older code says so until it is
measured again.

A figure quoted in prose is generated the same way: the number sits right before a marker
``<!-- fig: NAME PATH FORMAT -->`` (README.md and docs/*.md), e.g.
``1.13<!-- fig: attacks rows[kind=hoarder].run_s_per_step_vs_clean .2f -->x``, and is rewritten as
the value at ``PATH`` in ``docs/results/NAME.json`` formatted with ``FORMAT`` (a Python format
spec; ``PATH``: dotted keys, ``[i]`` for a list item, ``[field=value]`` for the first row whose
field prints as value). ``FORMAT`` may start with one transform of the value: ``abs:``, ``neg:``
(−x), ``inv:`` (1/x), ``comp:`` (1 − x), ``pct:`` (100x, for a fraction quoted as "N %"),
``len:`` (a list's length), e.g. ``80<!-- fig: lora rows[0].bytes_ratio inv:.0f -->x fewer bytes``.

A number in prose followed by a ratio, percent or throughput unit (``x``, ``×``, ``%``,
``samples/s``, ``tokens/s``, ``points``) is taken for a quoted measurement: it must carry a marker.
A number that is not a measurement (a bound, a setting, a target) is written as code
(```1.25x```) and is not checked. ``--check`` changes nothing and exits 1 when a document and the
results disagree, or when a document quotes an unmarked figure (the test suite runs it).
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
DOCS = ROOT / "docs"
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"^<!-- table: (?P<name>[\w-]+)(?:\.(?P<key>\w+))? (?P<columns>[\w,]+) -->\n```\n.*?```\n",
                    re.M | re.S)

NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?"
FIGURE = re.compile(rf"(?P<value>{NUMBER})?(?P<marker><!-- fig: (?P<name>[\w-]+) (?P<path>\S+) (?P<format>\S+) -->)")
UNMARKED = re.compile(r"(?<![\w.`$/-])[-−+]?\d[\d,]*(?:\.\d+)?\s?(?:x|×|%|samples/s|tokens/s|points)(?![\w/])"
                      r"(?! (?:interval|confidence|CI)\b)")  # "the 95% interval" quotes no measurement
TRANSFORMS = {"abs": abs, "neg": lambda x: -x, "inv": lambda x: 1 / x, "comp": lambda x: 1 - x,
              "pct": lambda x: 100 * x, "len": len}
STEP = re.compile(r"\.?(?P<key>[^.\[\]]+)|\[(?P<index>\d+)\]|\[(?P<field>\w+)=(?P<value>[^\]]+)\]")

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
    differs between its commit and the working tree, new files not yet added included (not
    ``HEAD``: tables regenerated before a change is committed must already say what they will say
    once it is, or ``--check`` fails on the commit)."""
    if not commit:
        return "code unknown"
    if commit.endswith("+dirty"):
        return "uncommitted code"
    if not git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"):
        return "commit not in this history"
    changed = set(git("diff", "--name-only", commit, "--", *paths).splitlines())
    changed |= set(git("ls-files", "--others", "--exclude-standard", "--", *paths).splitlines())  # new, not yet added
    return f"code changed since ({len(changed)} files)" if changed else "current code"


def provenance(meta: dict, name: str) -> str:
    """Where results file ``name``'s figures come from, in one line."""
    commit = meta.get("commit")
    models = meta.get("models")
    model_text = ", ".join(f"{name} {digest}" for name, digest in models.items()) if models else (
        "no model" if models == {} else "model hash not recorded")
    return (f"# commit {commit[:7] + ('+dirty' if commit.endswith('+dirty') else '') if commit else 'not recorded'}"
            f" | {code_status(commit, bench_code(bench_script(name)))} | {meta.get('machine', 'machine not recorded')} | {model_text}")


ROUNDING_NOISE = 1e-9
"""Floats smaller than this are a sum's rounding error (a difference of equal means), printed as 0."""


def without_rounding_noise(row: dict) -> dict:
    return {k: 0.0 if isinstance(v, float) and abs(v) < ROUNDING_NOISE else v for k, v in row.items()}


def render(name: str, key: str | None, columns: list[str]) -> str:
    """The rows of results file ``name`` (or the list ``meta[key]``) in ``columns``; the single
    column ``lines`` prints a list of strings (e.g. a run's summary lines) as they are."""
    data = json.loads((RESULTS / f"{name}.json").read_text())
    rows = data["meta"][key] if key else data["rows"]
    body = "\n".join(rows) if columns == ["lines"] else format_table([without_rounding_noise(r) for r in rows], columns)
    return f"```\n{body}\n{provenance(data['meta'], name)}\n```\n"


def lookup(data: object, path: str) -> object:
    """The value at ``path`` (see the module's docstring) in a results file's ``data``."""
    for step in STEP.finditer(path):
        if step.group("key") is not None:
            data = data[step.group("key")]  # type: ignore[index]
        elif step.group("index") is not None:
            data = data[int(step.group("index"))]  # type: ignore[index]
        else:
            field, value = step.group("field"), step.group("value")
            data = next(row for row in data if str(row.get(field)) == value)  # type: ignore[union-attr]
    return data


def figure(match: re.Match) -> str:
    """A quoted figure rewritten from its results file (a missing file, path or row: an error naming it)."""
    name, path, spec = match.group("name"), match.group("path"), match.group("format")
    try:
        value = lookup(json.loads((RESULTS / f"{name}.json").read_text()), path)
    except (OSError, KeyError, IndexError, StopIteration, TypeError) as error:
        raise SystemExit(f"figure {name} {path}: not in docs/results/{name}.json ({type(error).__name__}: {error})")
    transform, _, spec = spec.rpartition(":") if spec.split(":")[0] in TRANSFORMS else ("", "", spec)
    if transform:
        value = TRANSFORMS[transform](value)  # type: ignore[operator]
    text = format(value, spec)  # type: ignore[arg-type]
    if not re.fullmatch(NUMBER, text):
        raise SystemExit(f"figure {name} {path}: {text!r} is not a number (only numbers are quoted figures)")
    return f"{text}{match.group('marker')}"


def unmarked(text: str) -> list[tuple[int, str]]:
    """(line, figure) of every number in ``text``'s prose that reads as a measurement and carries no
    marker (fenced blocks, code spans and comments are not prose)."""
    def blank(match: re.Match) -> str:  # keeps the line numbers
        return re.sub(r"[^\n]", " ", match.group(0))

    prose = FIGURE.sub(lambda m: " " * len(m.group(0)), text)
    for pattern in (r"```.*?```", r"<!--.*?-->", r"`(?:[^`\n]|\n(?!\n))*`"):  # a code span ends with its paragraph
        prose = re.sub(pattern, blank, prose, flags=re.S)
    return [(prose.count("\n", 0, m.start()) + 1, m.group(0)) for m in UNMARKED.finditer(prose)]


def regenerate(text: str) -> str:
    def table(match: re.Match) -> str:
        head = match.group(0).split("\n", 1)[0]
        return f"{head}\n{render(match.group('name'), match.group('key'), match.group('columns').split(','))}"

    return FIGURE.sub(figure, MARKER.sub(table, text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a document is not up to date or quotes a figure without a marker")
    args = parser.parse_args()
    tables = current = figures = 0
    stale, loose = [], []
    for doc in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        text = doc.read_text()
        loose += [f"{doc.relative_to(ROOT)}:{line}: {quoted}" for line, quoted in unmarked(text)]
        new = regenerate(text)
        tables += len(MARKER.findall(text))
        figures += len(FIGURE.findall(text))
        current += new.count("| current code |")
        if new != text:
            stale.append(doc)
            if not args.check:
                doc.write_text(new)
    for line in loose:
        print(f"{line}: a quoted figure with no marker (or a setting not written as code)", file=sys.stderr)
    if args.check:
        for doc in stale:
            print(f"{doc} differs from docs/results/: run python bench/tables.py", file=sys.stderr)
        if not stale and not loose:
            print(f"{tables} tables and {figures} quoted figures match their results files")
        return 1 if stale or loose else 0
    print(f"regenerated {tables} tables and {figures} quoted figures in README.md and {DOCS}/*.md "
          f"({len(stale)} files changed); {current} tables measured on the current code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
