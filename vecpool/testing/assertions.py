"""Assertions that compare two vector envs, or their results, exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, VectorEnv

__all__ = ["assert_same_data", "assert_same_partial_reset", "assert_same_rollout"]


def _describe(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 2000 else text[:2000] + "..."


def assert_same_partial_reset(
    reference: Any, candidate: Any, step_result: Any, label: str
) -> None:
    """DISABLED mode: reset the envs that just ended in both; same results.

    Does nothing in other modes, or when no env ended in ``step_result`` (the
    reference's ``step`` result).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from gymnasium.vector import AutoresetMode, SyncVectorEnv
        >>> fns = [lambda: gym.make("CartPole-v1")] * 2
        >>> mode = AutoresetMode.DISABLED
        >>> a, b = (SyncVectorEnv(fns, autoreset_mode=mode) for _ in "ab")
        >>> _ = a.reset(seed=0), b.reset(seed=0)
        >>> assert_same_partial_reset(a, b, a.step(np.zeros(2, np.int64)), "step 0")
    """
    done = np.asarray(step_result[2]) | np.asarray(step_result[3])
    mode = reference.metadata.get("autoreset_mode")
    if mode is not AutoresetMode.DISABLED or not done.any():
        return
    options = {"reset_mask": done}
    assert_same_data(
        reference.reset(options=dict(options)),
        candidate.reset(options=dict(options)),
        f"{label}: partial reset",
    )


def assert_same_data(expected: Any, actual: Any, label: str = "data") -> None:
    """Assert that two results are exactly equal, types included.

    Uses :func:`gymnasium.utils.env_checker.data_equivalence` with ``exact=True``
    (dict keys, tuple lengths, array shapes and dtypes, object arrays recursively).

    Args:
        expected: The reference value.
        actual: The value under test.
        label: What is compared, for the failure message.

    Raises:
        AssertionError: If the values differ.
    """
    if not data_equivalence(expected, actual, exact=True):
        msg = (
            f"{label} differs.\nexpected: {_describe(expected)}\n"
            f"actual:   {_describe(actual)}"
        )
        raise AssertionError(msg)


def assert_same_rollout(
    reference: VectorEnv[Any, Any, Any],
    candidate: VectorEnv[Any, Any, Any],
    actions: Sequence[Any],
    *,
    seed: int = 0,
    reset_seeds: Sequence[int | None] | None = None,
    check_options_unchanged: bool = True,
) -> int:
    """Reset both vector envs with ``seed``, step them in lockstep and compare.

    Observations, rewards, terminations, truncations and infos must be exactly equal
    after the reset and every step. With ``AutoresetMode.DISABLED`` (read from
    ``reference.metadata["autoreset_mode"]``), envs that ended are reset after each
    step with ``reset(options={"reset_mask": mask})`` on both, those results are
    compared too, and the ``options`` dict given to ``candidate`` must be left
    unchanged (when ``check_options_unchanged``).

    Args:
        reference: The trusted implementation, e.g. ``gymnasium.vector.SyncVectorEnv``.
        candidate: The implementation under test.
        actions: Batched actions, one per step.
        seed: Seed of the first reset.
        reset_seeds: For DISABLED mode, the seed of the masked reset after step
            ``t`` is ``reset_seeds[t % len(reset_seeds)]`` (default: always ``None``).
        check_options_unchanged: Check that ``candidate`` does not mutate ``options``.

    Returns:
        The number of sub-environment episodes that ended during the rollout.

    Raises:
        AssertionError: On the first difference.
    """
    mode = reference.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    assert_same_data(
        mode, candidate.metadata.get("autoreset_mode"), "metadata['autoreset_mode']"
    )
    expected_reset = reference.reset(seed=seed)
    actual_reset = candidate.reset(seed=seed)
    assert_same_data(expected_reset, actual_reset, f"reset(seed={seed})")
    ended = 0
    for step_index, action in enumerate(actions):
        expected = reference.step(action)
        actual = candidate.step(action)
        names = ("observations", "rewards", "terminations", "truncations", "infos")
        for name, want, got in zip(names, expected, actual, strict=True):
            assert_same_data(want, got, f"step {step_index}: {name}")
        done = np.logical_or(expected[2], expected[3])
        ended += int(np.count_nonzero(done))
        if mode == AutoresetMode.DISABLED and done.any():
            reset_seed = None
            if reset_seeds:
                reset_seed = reset_seeds[step_index % len(reset_seeds)]
            mask = done.copy()
            reference_options: dict[str, Any] = {"reset_mask": mask.copy()}
            candidate_options: dict[str, Any] = {"reset_mask": mask.copy()}
            expected_reset = reference.reset(seed=reset_seed, options=reference_options)
            actual_reset = candidate.reset(seed=reset_seed, options=candidate_options)
            assert_same_data(
                expected_reset,
                actual_reset,
                f"step {step_index}: reset(seed={reset_seed}, reset_mask={mask})",
            )
            if check_options_unchanged:
                assert_same_data(
                    {"reset_mask": mask}, candidate_options, "options after reset"
                )
    return ended
