"""A planted bug for the divergence attribution (docs/decisions.md, "Divergence attribution"): a wrong KV
commit, and a script that writes a whole run directory with it.

`wrong_node_commit` keeps, for every accepted draft node, the K/V of the node after it in the tree's node
order (an off-by-one in the gather index), so the cache no longer holds the accepted tokens' keys and
values. Vanilla proposes only the root (path ``[0]``, one node) and is untouched, so it stays the honest
reference; every drafter that proposes anything decodes from a corrupted cache. The loop calls
``kv.commit_path`` through the module (`specbench.harness.loop`), so patching the module attribute plants it.

Used by tests/test_attribution.py (``monkeypatch.setattr(kv, "commit_path", wrong_node_commit)``) and, as a
script, for the planted-bug run of docs/decisions.md::

    SPECBENCH_DATA=../shared/data python tests/planted_kv_bug.py --drafters vanilla,ngram,... --out DIR ...

(every argument after the script's name is ``specbench run``'s).
"""

from __future__ import annotations

import sys

from specbench import kv

HONEST_COMMIT = kv.commit_path


def wrong_node_commit(cache, past_len: int, path: list[int], n_nodes: int) -> None:
    """`kv.commit_path` with the bug: node p of the accepted path is committed from slot p + 1 (the root's
    slot and the last node's stay right)."""
    shifted = [path[0]] + [min(node + 1, n_nodes - 1) for node in path[1:]]
    HONEST_COMMIT(cache, past_len, shifted, n_nodes)


def main(argv: list[str]) -> int:
    from specbench.harness.cli import main as specbench

    kv.commit_path = wrong_node_commit
    try:
        return specbench(["run", *argv])
    finally:
        kv.commit_path = HONEST_COMMIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
