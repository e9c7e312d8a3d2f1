"""Which code made a run: the git commit and whether the tree had uncommitted changes, and a digest of
the package's own source files (which identifies the code even where no git checkout is at hand, as in
an installed copy on a GPU machine).

The commit is looked up from the package's folder (an editable install, a clone) and then from the
working directory (a copy installed from a clone the run is started in); ``git_sha`` is null only when
neither is inside a git checkout, and the source digest is always there.

git is asked with ``safe.directory=*``: a checkout owned by another user (a tree copied onto a GPU machine,
a container running as root) is otherwise refused as of "dubious ownership", and the H100 run's manifest
recorded a null sha that way. Only read-only commands run (rev-parse, status), with the repository's
fsmonitor hook switched off, so nothing the checkout's config names is executed.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

PACKAGE_FOLDERS = ("specbench", "drafters", "harness", "reports")  # the repository's package folders
TRUST = ("-c", "safe.directory=*", "-c", "core.fsmonitor=false")  # read another user's checkout, run no hook


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *TRUST, *args], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(folders: tuple[Path, ...] | None = None) -> dict:
    """``{"git_sha", "git_dirty", "git_root"}`` of the first folder inside a git checkout (None each when
    none is). Dirty means tracked files differ from the commit (untracked files do not count)."""
    here = Path(__file__).resolve().parent
    for folder in folders or (here, Path.cwd()):
        sha = _git(folder, "rev-parse", "HEAD")
        if sha and sha.strip():
            status = _git(folder, "status", "--porcelain", "--untracked-files=no")
            root = _git(folder, "rev-parse", "--show-toplevel")
            return {"git_sha": sha.strip(), "git_dirty": None if status is None else bool(status.strip()),
                    "git_root": root.strip() if root else None}
    return {"git_sha": None, "git_dirty": None, "git_root": None}


def source_digest(package: Path | None = None) -> str:
    """sha256 over the package's .py files (each module's path inside the package, and its content, in path
    order): the code that ran. A clone (``specbench/``, ``drafters/``, ``harness/``, ``reports/`` side by
    side) and an installed copy of the same code (``specbench/drafters/`` ...) give the same digest."""
    package = package or Path(__file__).resolve().parents[1]  # the repository, or the installed `specbench`
    in_clone = (package / "specbench" / "__init__.py").is_file()
    roots = {name: package / name for name in PACKAGE_FOLDERS} if in_clone else {"specbench": package}
    named = {}
    for name, root in roots.items():
        for path in root.rglob("*.py"):
            if "__pycache__" not in path.parts:
                inside = path.relative_to(root).as_posix()
                named[inside if name == "specbench" else f"{name}/{inside}"] = path
    digest = hashlib.sha256()
    for inside in sorted(named):
        digest.update(inside.encode() + b"\0" + named[inside].read_bytes() + b"\0")
    return digest.hexdigest()
