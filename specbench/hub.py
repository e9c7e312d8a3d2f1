"""Hugging Face Hub ids where a path is expected: ``--model lmsys/vicuna-7b-v1.3`` and
``--drafter-option medusa.checkpoint=FasterDecoding/medusa-vicuna-7b-v1.3``.

A spec that is not an existing local path and has the shape ``owner/name`` is a Hub id: it is resolved
by the hub client's own ``snapshot_download``, which reads the client's cache (``HF_HUB_CACHE``,
``HF_HOME``) and downloads only what the cache lacks. Offline (``HF_HUB_OFFLINE=1``, or no network) a
repository already in the cache keeps working; one that is not gives a one-line error saying how to get
it. Results name a Hub model by its repository name (``vicuna-7b-v1.3``) and record the full id.
"""

from __future__ import annotations

import re
from pathlib import Path

from specbench.errors import SpecbenchError

#: owner/name as the Hub spells repository ids (no leading dot or slash, exactly one slash)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_hub_id(spec: str) -> bool:
    """True for ``owner/name`` that is not an existing local path."""
    return bool(HUB_ID.match(spec)) and not Path(spec).expanduser().exists()


def hub_snapshot(repo_id: str, what: str) -> Path:
    """The local folder of ``repo_id``'s snapshot (from the cache, or downloaded into it)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=constants.HF_HUB_OFFLINE))
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise SpecbenchError(f"{what} {repo_id}: no such repository on the Hugging Face Hub") from None
    except LocalEntryNotFoundError:
        raise SpecbenchError(f"{what} {repo_id}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and the "
                             f"Hub cannot be reached; fetch it once with `hf download {repo_id}`") from None
    except OSError as error:  # network failures the client does not turn into the above
        raise SpecbenchError(f"{what} {repo_id}: cannot fetch it from the Hugging Face Hub ({error})") from None


def local_or_hub(spec: str, what: str) -> Path:
    """``spec`` as a local path: itself when it exists or is not Hub-shaped, else the Hub snapshot."""
    return hub_snapshot(spec, what) if is_hub_id(spec) else Path(spec).expanduser()
