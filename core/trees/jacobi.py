"""The Jacobi-window draft source (SJD, SPEC 9.1) as a policy of the one tree grammar.

``jacobi:L`` (fresh tokens uniform random, SJD's default) and ``jacobi:L,copy`` (a fresh token copies
its left neighbour) name a :class:`JacobiWindow`: no drafter and no tree, a window of L sampled drafts
verified by one target forward (rule R2's sampled-draft test, optionally boosted). ``simulate.run``
decodes it with :mod:`simulate.jacobi`; the window's indexing is :mod:`theory.jacobi_sampler`'s.
"""

from __future__ import annotations

from relaxspec.core.trees.numbers import spec_int
from relaxspec.core.trees.policies import BuiltTree, DraftFn, PolicySpec, TreePolicy
from relaxspec.theory.jacobi_sampler import DEFAULT_FRESH, check_fresh, check_window_size

FORM = "jacobi:L[,uniform|copy]"


class JacobiWindow(TreePolicy):
    """A window of ``window`` drafts refilled with ``fresh`` tokens (``uniform`` or ``copy``)."""

    def __init__(self, window: int, fresh: str = DEFAULT_FRESH) -> None:
        self.window = check_window_size(window)
        self.fresh = check_fresh(fresh)
        self.name = f"jacobi:{self.window}" + ("" if self.fresh == DEFAULT_FRESH else f",{self.fresh}")

    @classmethod
    def parse(cls, args: str) -> JacobiWindow:
        """The policy of a spec's arguments ``L`` or ``L,FRESH`` (:data:`FORM`)."""
        parts = args.split(",") if args else []
        if len(parts) not in (1, 2):
            raise ValueError(f"needs 1 or 2 comma-separated values ({FORM})")
        return cls(spec_int(parts[0], FORM), parts[1].strip() if len(parts) == 2 else DEFAULT_FRESH)

    @property
    def supports_draws(self) -> bool:
        """A window's drafts are sampled and verified by rule R2's test."""
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JacobiWindow) and (self.window, self.fresh) == (other.window, other.fresh)

    def __hash__(self) -> int:
        return hash((self.window, self.fresh))

    def build(self, q_root, draft: DraftFn, u=None) -> BuiltTree:
        raise ValueError(f"{self} is a Jacobi window, not a draft tree: it has no drafter; "
                         "decode it with simulate.run (simulate.jacobi)")

    def kernel_spec(self) -> PolicySpec:
        raise ValueError(f"{self} is a Jacobi window, not a draft tree: simulate.run decodes it with "
                         "relaxspec.simulate.jacobi")

    def __repr__(self) -> str:
        return f"JacobiWindow({self.window}, {self.fresh!r})"
