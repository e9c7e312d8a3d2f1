"""Record the target's weights fingerprint in checkpoint recipes trained before recipes carried one.

`specbench train` writes ``target.fingerprint`` itself; this adds it to older recipes so that their
checkpoints also load for an in-memory model (``specbench.run(model=hf_model, tokenizer=...)``), whose
identity is its weights, not a file hash. A recipe whose recorded sha256 is not the target's is left alone.

    python scripts/fingerprint_checkpoints.py --model default drafters/checkpoints/*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbench.model import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="+", type=Path)
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    handle = load_target(args.model).handle
    for path in args.recipes:
        recipe = json.loads(path.read_text(encoding="utf-8"))
        if recipe.get("target", {}).get("sha256") != handle.sha256:
            print(f"{path}: trained for another target, skipped")
            continue
        recipe["target"]["fingerprint"] = handle.fingerprint
        path.write_text(json.dumps(recipe, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"{path}: fingerprint {handle.fingerprint[:16]}")


if __name__ == "__main__":
    main()
