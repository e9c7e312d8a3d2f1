"""The manifest says which code ran: the commit, whether the tree was dirty, and a source digest that an
installed copy of the same code shares."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from specbench.harness.provenance import PACKAGE_FOLDERS, git_state, source_digest

ROOT = Path(__file__).resolve().parents[1]


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder, check=True,
                   capture_output=True)


def one_commit_repo(repo):
    """A git repository at ``repo`` with one commit of one file, a.txt."""
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def test_commit_and_dirty_state(tmp_path):
    repo = one_commit_repo(tmp_path / "repo")
    clean = git_state((repo,))
    assert len(clean["git_sha"]) == 40 and clean["git_dirty"] is False
    (repo / "b.txt").write_text("untracked\n")
    assert git_state((repo,))["git_dirty"] is False  # untracked files do not make a run's code differ
    (repo / "a.txt").write_text("two\n")
    assert git_state((repo,)) == clean | {"git_dirty": True}
    outside = tmp_path / "plain"
    outside.mkdir()
    assert git_state((outside,)) == {"git_sha": None, "git_dirty": None, "git_root": None}
    assert git_state((outside, repo))["git_sha"] == clean["git_sha"]  # the next folder is asked


def test_source_digest_is_the_same_for_a_clone_and_an_installed_copy(tmp_path):
    clone = tmp_path / "clone"
    for name in PACKAGE_FOLDERS:
        shutil.copytree(ROOT / name, clone / name, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    installed = tmp_path / "site" / "specbench"
    shutil.copytree(ROOT / "specbench", installed, ignore=shutil.ignore_patterns("__pycache__"))
    for name in PACKAGE_FOLDERS[1:]:
        shutil.copytree(ROOT / name, installed / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_digest(clone) == source_digest(installed) == source_digest(ROOT)
    (installed / "tree.py").write_text((installed / "tree.py").read_text() + "\n# changed\n")
    assert source_digest(installed) != source_digest(clone)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give the checkout away")
def test_a_checkout_owned_by_another_user_still_gives_its_commit(tmp_path):
    """git refuses a repository another user owns ("dubious ownership"); the manifest's sha must not go null
    (the H100 run's did: a tree copied onto the machine, run as root)."""
    repo = one_commit_repo(tmp_path / "repo")
    mine = git_state((repo,))
    for path in [repo, *repo.rglob("*")]:
        os.chown(path, 65534, 65534, follow_symlinks=False)  # nobody
    plain = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert plain.returncode != 0 and "dubious ownership" in plain.stderr  # what git alone does
    assert git_state((repo,)) == mine and len(mine["git_sha"]) == 40 and mine["git_dirty"] is False
