"""Numba simulators of relaxed speculative decoding on draft trees.

Public API: :func:`verify_step` (the Numba twin of ``theory.sample_step``)
and :func:`step_expectation` (exact per-step expectations).
"""

from simulate.verify import StepExpectation, step_expectation, verify_step

__all__ = ["StepExpectation", "step_expectation", "verify_step"]
