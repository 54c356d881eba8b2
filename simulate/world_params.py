"""Parameters of the latent-field worlds (plain data) and their presets (SPEC section 6).

:class:`LatentParams` checks every value, sizes against stated bounds, before a world allocates
anything; :data:`PRESETS` holds the calibrated worlds. :mod:`simulate.worlds` builds worlds from them
(and re-exports both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.simulate.rng import check_seed
from relaxspec.simulate.world_kernels import STATE_AUX

CODEBOOKS = ("sphere", "clustered")
# Size bounds, checked before anything is allocated (as tree sizes are): V up to 2**18 (Open-MAGVIT2's
# codebook, the largest a visual AR model uses), d up to 1024, and V d up to 2**24 code entries (each
# float64 copy of the codebook under 128 MiB; a world keeps three).
MAX_VOCAB_SIZE = 2**18
MAX_DIM = 1024
MAX_CODEBOOK_ENTRIES = 2**24
# A grid world's width (SPEC 11): up to 256 tokens a row (a 4096-px image of 16-px patches). Its state
# carries the last grid_width + 1 tokens (simulate.world_kernels), so its transition table holds
# (dim + STATE_AUX + 1 + grid_width) V entries, bounded as the codebook is.
MAX_GRID_WIDTH = 256


@dataclass(frozen=True)
class LatentParams:
    """Parameters of a :class:`LatentWorld` (plain data; presets are instances).

    Attributes
    ----------
    vocab_size, dim : V and the code dimension d.
    codebook : "sphere" (uniform unit vectors) or "clustered" (unit vectors
        around ``n_clusters`` random centres with spread ``cluster_spread``).
    prior_scale : std of the per-token prior b (Gaussian).
    beta : inverse temperature of the target's latent term.
    rho, sigma : state memory and state noise of the transition.
    draft_beta, draft_sigma, draft_token_noise : the drafter's beta, the
        noise of its view of z, and the std of its fixed per-token error.
    beta_spread : how ambiguity varies across states: at state z both
        inverse temperatures are multiplied by exp(beta_spread <a, z>), a a
        fixed unit "difficulty axis" (0: every state equally ambiguous; a
        real image model has easy and hard stretches, which tree decoding
        skips through or stops at).
    draft_drift : how the drafter's view degrades below a step's root: at
        depth d >= 1 its noise is sqrt(draft_sigma^2 + draft_drift^2) (an
        EAGLE head reads the target's features at the root and its own
        predicted features below it, a step change: in its traces acceptance
        drops one level down and little further; 0: every depth alike).
    prefix_noise : the share of the transition noise's variance keyed by the whole prefix (SPEC 6),
        in [0, 1]; the rest is keyed by (sequence, position), so changing an earlier token moves the
        state only through rho and this share (SPEC 11: with 1, every prefix change redraws every
        later state and the context sensitivity kappa_m stays high at every lag; lower, kappa_m decays
        with m).
    lag1_noise : the share of the transition noise's variance keyed by (sequence, position, the token
        before), in [0, 1 - prefix_noise]: changing the token just before a position redraws this share
        of its noise, so kappa_1 rises while longer lags see the change only through rho (a model whose
        law moves with the last token far more than with the one before it; SPEC 11). 0: none.
    grid_width : W, the width of the token grid (0: no grid): token t sits at row t // W, column t % W.
    grid_above, grid_diagonal : weights of the codes of the tokens above (W back) and above-left /
        above-right (W + 1 and W - 1 back, where the grid has them) in the transition into a position,
        beside rho's memory and (1 - rho) for the token before: the token above matters as the token
        before does (0 for both: the grid changes nothing but the noise's position keys).
    seed : seed of the codebook, prior and noise keys.

    Worlds with ``prefix_noise`` 1 and no grid (every preset before SPEC 11) give the same rows bit for
    bit as before these parameters existed (tests/simulate/test_world_grid.py).
    """

    vocab_size: int = 16384
    dim: int = 8
    codebook: str = "sphere"
    n_clusters: int = 512
    cluster_spread: float = 0.3
    prior_scale: float = 0.5
    beta: float = 10.0
    rho: float = 0.7
    sigma: float = 0.3
    draft_beta: float = 10.0
    draft_sigma: float = 0.2
    draft_token_noise: float = 0.2
    beta_spread: float = 0.0
    draft_drift: float = 0.0
    prefix_noise: float = 1.0
    lag1_noise: float = 0.0
    grid_width: int = 0
    grid_above: float = 0.0
    grid_diagonal: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name, lo, hi in (("vocab_size", 2, MAX_VOCAB_SIZE), ("dim", 1, MAX_DIM),
                             ("n_clusters", 1, MAX_VOCAB_SIZE)):
            v = getattr(self, name)
            if int(v) != v or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r} (at most {hi}: the "
                                 "size limit of relaxspec's worlds)")
        if self.vocab_size * self.dim > MAX_CODEBOOK_ENTRIES:
            raise ValueError(f"vocab_size * dim must be at most {MAX_CODEBOOK_ENTRIES} (2**24 code entries), "
                             f"got {self.vocab_size} * {self.dim} = {self.vocab_size * self.dim}")
        if self.codebook not in CODEBOOKS:
            raise ValueError(f"codebook must be one of {CODEBOOKS}, got {self.codebook!r}")
        for name in ("cluster_spread", "prior_scale", "beta", "sigma", "draft_beta", "draft_sigma",
                     "draft_token_noise", "beta_spread", "draft_drift", "grid_above", "grid_diagonal"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        if not (np.isfinite(self.rho) and 0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must be in [0, 1], got {self.rho!r}")
        if not (np.isfinite(self.prefix_noise) and 0.0 <= self.prefix_noise <= 1.0):
            raise ValueError(f"prefix_noise must be in [0, 1], got {self.prefix_noise!r}")
        if not (np.isfinite(self.lag1_noise) and 0.0 <= self.lag1_noise <= 1.0 - self.prefix_noise + 1e-12):
            raise ValueError(f"lag1_noise must be in [0, 1 - prefix_noise] (shares of one variance), got "
                             f"{self.lag1_noise!r} with prefix_noise {self.prefix_noise!r}")
        v = self.grid_width
        if isinstance(v, bool) or int(v) != v or not 0 <= v <= MAX_GRID_WIDTH:
            raise ValueError(f"grid_width must be an integer in [0, {MAX_GRID_WIDTH}] (0: no grid), "
                             f"got {v!r}")
        if v == 0 and (self.grid_above > 0 or self.grid_diagonal > 0):
            raise ValueError(f"grid_above and grid_diagonal need a grid (grid_width >= 1), got grid_above "
                             f"{self.grid_above!r} and grid_diagonal {self.grid_diagonal!r} with "
                             "grid_width 0")
        extra = STATE_AUX + 1
        if self.stateful and (self.dim + extra + v) * self.vocab_size > MAX_CODEBOOK_ENTRIES:
            raise ValueError(f"(dim + {extra} + grid_width) * vocab_size must be at most "
                             f"{MAX_CODEBOOK_ENTRIES} (a grid or position-keyed world's transition table), "
                             f"got ({self.dim} + {extra} + {v}) * {self.vocab_size}")
        check_seed(self.seed)

    @property
    def stateful(self) -> bool:
        """Whether a state carries a position and token memory (a grid, or position-keyed noise)."""
        return self.grid_width > 0 or self.prefix_noise < 1.0 or self.lag1_noise > 0.0


# Calibrated with `relaxspec world-stats`: `confident` (LLM-like) has mean top-1 target probability
# about 0.75 and mean 1 - TV(p, q) about 0.84; `ambiguous` (LlamaGen-like token selection ambiguity,
# the range the LANTERN papers report for ImageNet c2i) has top-1 about 0.09 with a drafter of similar
# quality (1 - TV about 0.74), so the two differ mainly in ambiguity. `mini` is fitted to the shipped
# Fashion-MNIST model (`relaxspec mini ambiguity --fit`, mini/calibration.py; the fit, the model's
# SHA-256 and the statistics are in docs/mini_model.md): beta and the drafter's errors are chosen so
# that the mean top-1 probability and 1 - TV(p, q) match. That model is less ambiguous than LlamaGen
# (top-1 above 0.25), which is why it is a preset of its own rather than the `ambiguous` one.
PRESETS: dict[str, LatentParams] = {
    "confident": LatentParams(codebook="sphere", prior_scale=0.5, beta=150.0, rho=0.6, sigma=0.3,
                              draft_beta=150.0, draft_sigma=0.02, draft_token_noise=0.1, seed=1),
    "ambiguous": LatentParams(codebook="clustered", n_clusters=512, cluster_spread=0.08, prior_scale=0.3,
                              beta=30.0, rho=0.6, sigma=0.3, draft_beta=30.0, draft_sigma=0.05,
                              draft_token_noise=0.3, seed=2),
    "mini": LatentParams(codebook="clustered", n_clusters=512, cluster_spread=0.08, prior_scale=0.3,
                         beta=100.479, rho=0.6, sigma=0.3, draft_beta=100.479, draft_sigma=0.03669,
                         draft_token_noise=0.22017, seed=2),
    # Fitted to the first shipped model (weights/, V = 512) by the fit below (`relaxspec mini ambiguity
    # --fit`); `mini` above is its earlier two-figure fit at V = 16384, kept for the results that use it.
    "mini-fit": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                             prior_scale=0.3, beta=27.936, rho=0.8311, sigma=0.3, draft_beta=23.561,
                             draft_sigma=0.07747, draft_token_noise=0.46479, beta_spread=1.1284,
                             draft_drift=0.073, seed=2),
    "mini-fit-draft-gpt": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512,
                                       cluster_spread=0.08, prior_scale=0.3, beta=27.936, rho=0.8311,
                                       sigma=0.3, draft_beta=20.196, draft_sigma=0.09271,
                                       draft_token_noise=0.55625, beta_spread=1.1284, seed=2),
    "mini-fit-greedy": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                                    prior_scale=0.3, beta=31.225, rho=0.9499, sigma=0.3, draft_beta=27.137,
                                    draft_sigma=0.06316, draft_token_noise=0.37896, beta_spread=0.6216,
                                    draft_drift=0.0564, seed=2),
    # Fitted to the shipped `ambiguous` model (weights/ambiguous, V = 8192) by `relaxspec mini --weights
    # weights/ambiguous ambiguity --fit` (mini/calibration.py: top-1's mean, spread and persistence; each
    # drafter's ranked acceptance, flatness and, for the EAGLE head, its drift below the root), one world
    # per drafter and one along greedy paths; docs/mini_model.md has the figures of each.
    "mini-ambiguous": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                                   prior_scale=0.3, beta=38.101, rho=0.9499, sigma=0.3, draft_beta=23.79,
                                   draft_sigma=0.08005, draft_token_noise=0.48032, beta_spread=1.1567,
                                   draft_drift=0.06323, seed=2),
    "mini-ambiguous-draft-gpt": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512,
                                             cluster_spread=0.08, prior_scale=0.3, beta=38.101, rho=0.9499,
                                             sigma=0.3, draft_beta=17.568, draft_sigma=0.09393,
                                             draft_token_noise=0.56358, beta_spread=1.1567, seed=2),
    # the same fit along the model's greedy paths (one per class), for greedy decoding (rule r3)
    "mini-ambiguous-greedy": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512,
                                          cluster_spread=0.08, prior_scale=0.3, beta=45.944, rho=0.8135,
                                          sigma=0.3, draft_beta=30.808, draft_sigma=0.05906,
                                          draft_token_noise=0.35435, beta_spread=0.9907, draft_drift=0.05396,
                                          seed=2),
    # `mini-ambiguous` on the shipped ambiguous model's 8 x 8 token grid (SPEC 11): the transition noise
    # keyed by position but for 0.4% of its variance, the tokens above / above-left / above-right in the
    # transition, and rho, sigma, grid_above, grid_diagonal, prefix_noise chosen (Nelder-Mead on 16 x 64
    # tokens) so that kappa_1, 2, 4, 6, 7, 8 come near the model's (issue 28's table); every other
    # parameter is mini-ambiguous's (its top-1 0.20 against 0.22). docs/mini_model.md has both rows.
    "mini-ambiguous-grid": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512,
                                        cluster_spread=0.08, prior_scale=0.3, beta=38.101, rho=0.3015,
                                        sigma=0.3153, draft_beta=23.79, draft_sigma=0.08005,
                                        draft_token_noise=0.48032, beta_spread=1.1567, draft_drift=0.06323,
                                        prefix_noise=0.004, grid_width=8, grid_above=0.6951,
                                        grid_diagonal=0.2002, seed=2),
}
