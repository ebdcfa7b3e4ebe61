"""mypy over every module of the distribution, each by the name it is installed under:
``autoscaler.providers.aws`` for providers/aws.py (tests/package_dirs.py).

mypy names a module by the folders it sits in, and cannot follow pyproject.toml's
package-dir mapping nor the import hook an editable install makes of it (mypy#13392,
mypy#10564, setuptools#3518): given ``-p autoscaler`` it finds autoscaler/ without
autoscaler.providers. So the modules are handed to it here, named; the options (strict,
the overrides) are still the ``[tool.mypy]`` table, read by mypy itself.

usage: .venv/bin/python -m tests.typecheck [mypy options]
Prints what mypy prints and exits as it does: 1 on errors, 2 when it could not check.
"""

from __future__ import annotations

import os
import sys

from mypy import build
from mypy.errors import CompileError
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.modulefinder import BuildSource

from tests.package_dirs import ROOT, folders, modules


def sources() -> list[BuildSource]:
    """Every module of every package, by its installed name; a folder without an
    ``__init__.py`` (config/examples) is a namespace package, as ``mypy -p`` counts it."""
    found = [
        BuildSource(str(folder.relative_to(ROOT)), package, None)
        for package, folder in folders()
        if not (folder / "__init__.py").exists()
    ]
    for name, path in modules():
        found.append(BuildSource(str(path.relative_to(ROOT)), name.removesuffix(".__init__"), None))
    return found


def main(args: list[str]) -> int:
    os.chdir(ROOT)  # where mypy reads its configuration, and what the paths are relative to
    fscache = FileSystemCache()
    _, options = process_options(args, require_targets=False, fscache=fscache)
    targets = sources()
    errors: list[str] = []

    def show(_file: str | None, messages: list[str], serious: bool) -> None:
        if messages:
            print(*messages, sep="\n", file=sys.stderr if serious else sys.stdout)
        errors.extend(m for m in messages if ": error:" in m)

    try:
        build.build(targets, options, flush_errors=show, fscache=fscache)
    except CompileError as e:
        show(None, e.messages, not e.use_stdout)
        return 2
    if errors:
        files = len({m.split(":", 1)[0] for m in errors})
        print(f"Found {len(errors)} errors in {files} files (checked {len(targets)} source files)")
        return 1
    print(f"Success: no issues found in {len(targets)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
