"""What a simulation returns: :class:`SimResult`, per-step arrays and their summaries."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.verification import Verification


@dataclass
class SimResult:
    """Per-step records of a run and their summaries.

    Per-step arrays (steps of sequence 0 first, then 1, ...): ``tokens``
    (accepted drafts + 1), ``tree_size`` (draft nodes, root excluded),
    ``tree_depth``, ``accepted_depth``, ``draft_calls``, ``root_choice``
    (rank of the accepted root child, -1 if none), ``token_tv`` (the exact
    TV of the step's emitted tokens: sum over the nodes that decided them of
    TV(law the node emits, its target), see ``simulate.step_kernels.path_tv``; boosted R2 and rule r4:
    the proved per-step bound's terms the step realised, see ``simulate.engine``),
    ``expected_tokens`` and ``expected_tv`` (theory's exact E[tokens] and
    E[token_tv] given the step's tree and state; NaN unless the run had
    ``exact_expectations=True``), ``sequence``. ``verification``: the rule, its
    relaxation or boost and its variant the run verified with
    (``theory.verification.Verification``; ``str(verification)`` is its spec).
    ``target_forwards``: per step, the target forwards it made (VVS, ``simulate.vvs``: 0 on a skip step,
    1 otherwise); ``None`` (every other run) is one per step. :attr:`tokens_per_forward` reads it.
    """

    world: str
    tree: str
    verification: Verification
    temperature: float
    n_sequences: int
    seq_len: int
    seed: int
    tokens: np.ndarray
    tree_size: np.ndarray
    tree_depth: np.ndarray
    accepted_depth: np.ndarray
    draft_calls: np.ndarray
    root_choice: np.ndarray
    token_tv: np.ndarray
    expected_tokens: np.ndarray
    expected_tv: np.ndarray
    sequence: np.ndarray
    exact_expectations: bool = False
    seconds: float = 0.0  # wall-clock seconds of the decoding (validation and tables excluded)
    extra: dict = field(default_factory=dict)  # run(): "cpu_seconds", the process's CPU time meanwhile
    target_forwards: np.ndarray | None = None

    @property
    def n_steps(self) -> int:
        """Verification steps over all sequences."""
        return int(self.tokens.size)

    def _per_sequence(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.sequence, weights=values, minlength=self.n_sequences)

    def _ratio_se(self, values: np.ndarray, per: np.ndarray | None = None) -> float:
        """Cluster-robust (by sequence) standard error of sum(values) / sum(per) (``per``: one per step,
        the default, or e.g. the steps' target forwards)."""
        n = self._per_sequence(np.ones(self.n_steps) if per is None else per.astype(np.float64))
        t = self._per_sequence(values)
        used = n > 0
        S = used.sum()
        if S < 2:
            return float("nan")
        r = t.sum() / n.sum()
        return float(np.sqrt(S / (S - 1) * np.sum((t[used] - r * n[used]) ** 2)) / n.sum())

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens emitted per verification step (total tokens / total steps)."""
        return float(self.tokens.mean())

    @property
    def tokens_per_forward(self) -> float:
        """Tokens emitted per target forward: total tokens / total :attr:`target_forwards` (a skipped step's
        tokens count with no forward; without skips, :attr:`mean_tokens_per_step`)."""
        forwards = self.n_steps if self.target_forwards is None else int(self.target_forwards.sum())
        return float(self.tokens.sum() / forwards)

    @property
    def se_tokens_per_forward(self) -> float:
        """Standard error of :attr:`tokens_per_forward` (sequences are the units; without
        :attr:`target_forwards`, :attr:`se_tokens_per_step` exactly)."""
        return self._ratio_se(self.tokens.astype(np.float64), self.target_forwards)

    @property
    def se_tokens_per_step(self) -> float:
        """Standard error of :attr:`mean_tokens_per_step` (sequences are the independent units)."""
        return self._ratio_se(self.tokens.astype(np.float64))

    def _need_expectations(self, name: str) -> None:
        if not self.exact_expectations:
            raise ValueError(f"{name} needs theory's per-step expectations: "
                             "run(..., exact_expectations=True)")

    @property
    def mean_expected_tokens(self) -> float:
        """Theory's exact E[tokens | tree, state] over the visited steps (needs exact_expectations)."""
        self._need_expectations("mean_expected_tokens")
        return float(self.expected_tokens.mean())

    @property
    def se_difference(self) -> float:
        """Standard error of mean(tokens - expected_tokens) (a martingale difference: mean 0)."""
        self._need_expectations("se_difference")
        return self._ratio_se(self.tokens - self.expected_tokens)

    @property
    def mean_accepted_depth(self) -> float:
        """Accepted drafts per step."""
        return float(self.accepted_depth.mean())

    @property
    def mean_tree_depth(self) -> float:
        """Depth of the drafted tree."""
        return float(self.tree_depth.mean())

    @property
    def mean_tree_size(self) -> float:
        """Draft nodes verified per step (root excluded)."""
        return float(self.tree_size.mean())

    @property
    def draft_calls_per_step(self) -> float:
        """Drafter forwards per step."""
        return float(self.draft_calls.mean())

    @property
    def tv_bound_per_sequence(self) -> float:
        """Mean over sequences of the summed ``token_tv``: estimates the bound on TV(generated, target).

        docs/theory.md, Theorem 12: TV(law of a sequence, target) <= sum over
        its tokens of E[TV(law of the node deciding the token, p)]; each
        token's term is exact here, and its mean over sequences is unbiased."""
        return float(self._per_sequence(self.token_tv).mean())

    @property
    def tv_bound_per_token(self) -> float:
        """Summed ``token_tv`` per emitted token."""
        return float(self.token_tv.sum() / self.tokens.sum())

    def summary(self) -> dict[str, float]:
        """The scalar summaries (the CSV's result columns)."""
        return {
            "mean_tokens_per_step": self.mean_tokens_per_step,
            "se_tokens_per_step": self.se_tokens_per_step,
            "mean_accepted_depth": self.mean_accepted_depth,
            "mean_tree_depth": self.mean_tree_depth,
            "mean_tree_size": self.mean_tree_size,
            "draft_calls_per_step": self.draft_calls_per_step,
            "tv_bound_per_token": self.tv_bound_per_token,
            "tv_bound_per_sequence": self.tv_bound_per_sequence,
        }

    STEP_COLUMNS = ("sequence", "tokens", "tree_size", "tree_depth", "accepted_depth", "draft_calls",
                    "root_choice", "token_tv", "expected_tokens", "expected_tv")
    """The per-step arrays, in :meth:`to_frame`'s column order."""

    def config(self) -> dict[str, object]:
        """What ran: the configuration columns (the verification as its spec string)."""
        return {"world": self.world, "tree": self.tree, "verification": str(self.verification),
                "temperature": self.temperature,
                "n_sequences": self.n_sequences, "seq_len": self.seq_len, "seed": self.seed}

    def to_frame(self, per: str = "step"):  # -> pandas.DataFrame (pandas loads only when called)
        """The result as a pandas DataFrame: one row per verification step (``per="step"``: the configuration
        columns, then :data:`STEP_COLUMNS`), or one row of the configuration and :meth:`summary`
        (``per="run"``)."""
        import pandas as pd

        if per == "run":
            return pd.DataFrame([{**self.config(), **self.summary()}])
        if per != "step":
            raise ValueError(f"per must be 'step' or 'run', got {per!r}")
        frame = pd.DataFrame({name: getattr(self, name) for name in self.STEP_COLUMNS})
        for i, (name, value) in enumerate(self.config().items()):
            frame.insert(i, name, value)
        return frame


# ------------------------------------------------------------------ kernel
