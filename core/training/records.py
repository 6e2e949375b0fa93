"""What a stage writes into its .json files: values JSON can write (a module of its own, so a stage that writes
numbers is keyed by this code and nothing else of the library)."""

from __future__ import annotations

from typing import Any

import numpy as np


def plain(value: Any) -> Any:
    """numpy scalars -> Python numbers (integral counts stay ints), recursively: values JSON can write."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value
