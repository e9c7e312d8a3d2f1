"""specbench: a pluggable benchmark for speculative-decoding drafters.

Public API for drafter authors::

    from specbench import Drafter, DraftTree, DraftContext, register_drafter
"""

from specbench.drafter import DraftContext, Drafter, TargetHandle
from specbench.errors import SpecbenchError
from specbench.registry import available_drafters, create_drafter, get_drafter_class, register_drafter
from specbench.tree import DraftTree
from specbench.verify import VerifyOutcome, verify_greedy

__version__ = "0.1.0"

__all__ = [
    "DraftContext",
    "DraftTree",
    "Drafter",
    "SpecbenchError",
    "TargetHandle",
    "VerifyOutcome",
    "available_drafters",
    "create_drafter",
    "get_drafter_class",
    "register_drafter",
    "verify_greedy",
]
