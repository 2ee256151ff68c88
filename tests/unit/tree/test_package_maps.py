"""Every package of ``src/echo2`` says in its ``__init__`` docstring what each of its modules is for:
a newcomer reads the map one package at a time (docs/architecture.md draws the whole)."""

import ast
import re

import pytest
from paths import SOURCE

PACKAGES = sorted(folder for folder in [SOURCE, *SOURCE.rglob("*")]
                  if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")))


def named(docstring: str, module: str) -> bool:
    """``module.py``, ``module/``, or :mod:`...module` in ``docstring``."""
    return bool(re.search(rf"(?<![\w]){re.escape(module)}(\.py\b|/|`)", docstring))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda folder: str(folder.relative_to(SOURCE.parent)))
def test_each_package_lists_its_modules(package):
    init = package / "__init__.py"
    assert init.exists(), f"{package} has modules but no __init__.py to describe them"
    docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
    modules = [path.stem for path in package.glob("*.py") if path.name != "__init__.py"]
    modules += [folder.name for folder in package.iterdir() if (folder / "__init__.py").exists()]
    missing = sorted(module for module in modules if not named(docstring, module))
    assert not missing, f"{init.relative_to(SOURCE.parent)}'s docstring does not say what {missing} are for"
