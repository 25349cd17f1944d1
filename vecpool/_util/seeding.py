"""Seeds derived from seeds: what a restarted env or Ray actor starts from."""

from __future__ import annotations

import numpy as np

__all__ = ["derive_seed"]


def derive_seed(seed: int, incarnation: int) -> int:
    """The seed of an env's ``incarnation``-th replacement, given its last seed.

    Args:
        seed: The seed last given to the env (a non-negative int).
        incarnation: 1 for the first replacement, 2 for the next...

    Returns:
        A seed in ``[0, 2**32)``, a pure function of both arguments.
    """
    state = np.random.SeedSequence([seed, incarnation]).generate_state(1, np.uint32)
    return int(state[0])
