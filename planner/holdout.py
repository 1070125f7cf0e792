"""Which published runs are kept out of every fit.

A run is held out when the first byte of the SHA-1 of its id is below 64 (about a quarter of the rows, spread over
every group and GPU generation without looking at their values). The rule depends on the id alone, so adding rows
never moves an existing row between the fitted and the held-out set, and nobody can choose which rows land where.
Calibration (bench/calibrate.py) fits constants on the other rows only; `python -m planner validate` reports the
held-out rows' errors separately, so a constant that only fits its own rows shows up.
"""
from __future__ import annotations

import hashlib

HOLDOUT_BELOW = 64  # of 256: one row in four


def is_holdout(run_id: str) -> bool:
    return hashlib.sha1(str(run_id).encode()).digest()[0] < HOLDOUT_BELOW
