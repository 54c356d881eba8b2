"""The methods the frontier comparison runs (:mod:`relaxspec.studies.frontier`) and ``relaxspec advise``
ranks: one :class:`Method` per row, in table order, and the families the claims group them by.

:func:`methods` is the comparison's table: the 2024-2025 rows (issues 14 and 15: AR, EAGLE-2, LANTERN,
LANTERN++, the static tree, SJD, GSD, Cool-SD, traversal R4, the budgeted relaxation) and the 2026
frontier (issue 29, SPEC 10): SCD's coupled windows, SJD-PAC's proactive windows (+PD, +PD+AC), VVS's
skipped verification, and ours beside them, the budgeted relaxation on SCD's and SJD-PAC's windows
(docs/theory.md 15.6). :func:`scan_methods` is the window-length scan of SJD against SCD (SCD's claim).
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxspec.theory.boost import Boost
from relaxspec.theory.coupled import Coupling
from relaxspec.theory.verification import Verification

WINDOW = 15  # SJD's window: 16 positions per forward, 15 drafts (docs/frontier_sources.md)
EAGLE2 = "eagle2:10,4,58"
STATIC = "static:naive_extend_57"
WORLD_K, SHIPPED_K = 1000, 50  # proximity-set sizes: ~6% of V = 16384; ~10% of the shipped model's 512
REFERENCE_V = 16384  # the V at which WORLD_K is the proximity-set size (the presets')
BUDGETS = (0.05, 0.1, 0.2)  # per-node TV budgets of the budgeted relaxation
COOL_DELTAS = (1.1, 2.0)  # Cool-SD's two published strengths (docs/frontier_sources.md)
PAC_WINDOW = 32  # SJD-PAC's ablation window (SPEC 10.2: 2.31 -> 2.71 -> 3.52 at L = 32)
SCAN_WINDOWS = (8, 16, 32, 64)  # SCD's claim: tokens per forward rising with L where SJD's stay flat
VVS_DELTAS = (0.1, 0.2)  # LANTERN's delta on VVS's verify steps (the LANTERN rows' deltas)
VVS_INTERVALS = (2, 4)  # VVS's uniform schedule: skip every i-th step
VVS_TREE = "10,4,58"  # VVS skips verification of EAGLE-2's trees (EAGLE2's settings)
BOUNDED_SKIP_TV = 0.2  # ours: VVS's skips taken only when every token they can emit has TV <= this
DDD = "ddd:10,11,5/7/9,-0.3,60"
SEQUOIA = "sequoia:57,8"


@dataclass(frozen=True)
class Method:
    """One row of the comparison: a label, its family (the figure's style key), tree spec and
    verification spec (``{k}``, the proximity-set size, is filled per setting). ``shipped_only``: a
    setting the worlds cannot vary (GSD's embedding: a world has one); ``decoder``: whether the shipped
    models' reference decoder runs it."""

    label: str
    family: str
    tree: str
    verification: str = "r1"
    lossy: bool = False
    shipped_only: bool = False
    decoder: bool = True

    def verification_for(self, k: int) -> Verification:
        """The verification at proximity-set size ``k``."""
        return Verification.parse(self.verification.format(k=k))


def neighbour_k(vocab_size: int) -> int:
    """The proximity-set size at V: :data:`WORLD_K` (at V = 16384) scaled to V (1000 at the presets' V,
    500 in the grid world, 125 at ``--quick``'s V = 2048)."""
    return max(1, min(vocab_size - 1, round(WORLD_K * vocab_size / REFERENCE_V)))


def methods(every: bool = False) -> list[Method]:
    """The comparison's rows, in table order; ``every``: also :func:`later_methods` (what ``relaxspec
    advise`` ranks: every method and setting the suite implements)."""
    rows = [
        Method("AR", "ar", "ar"),
        Method("exact EAGLE-2", "eagle2", EAGLE2),
        *[Method(f"LANTERN δ={d}", "lantern", EAGLE2, f"r1+lantern:k={{k}},delta={d}", lossy=True)
          for d in (0.1, 0.2)],
        *[Method(f"LANTERN++ λ={lam}", "lantern++", STATIC, f"r2+lantern++:k={{k}},lam={lam}", lossy=True)
          for lam in (2, 5)],
        Method("exact static tree (R2)", "naive_extend_57", STATIC, "r2"),
        Method("SJD", "jacobi", f"jacobi:{WINDOW}", "r2"),
        *[Method(f"GSD G={G}", "gsd", f"jacobi:{WINDOW}", f"r2+gsd:G={G},tau=0.15,dist=0.5", lossy=True)
          for G in (3, 10, 25, 50)],
        Method("GSD G=10, VQ codebook", "gsd", f"jacobi:{WINDOW}",
               "r2+gsd:G=10,tau=0.15,dist=0.5,embedding=codebook", lossy=True, shipped_only=True),
        *[Method(f"Cool-SD δ={d:g}", "cool-sd", STATIC, f"r2+{Boost.cool(d)}", lossy=True)
          for d in COOL_DELTAS],
        # issue 15: traversal verification and the budgeted relaxation (a proved TV bound per node)
        Method("R4 exact (static tree)", "r4", STATIC, "r4"),
        Method("SJD + R4", "r4-jacobi", f"jacobi:{WINDOW}", "r4"),
        *[Method(f"R2 + budget δ={d:g}", "budget", STATIC, f"r2+budget:tv={d:g},k={{k}}", lossy=True)
          for d in BUDGETS],
        *[Method(f"R4 + budget δ={d:g}", "budget-r4", STATIC, f"r4+budget:tv={d:g},k={{k}}", lossy=True)
          for d in BUDGETS],
        *[Method(f"SJD + R4 + budget δ={d:g}", "budget-jacobi", f"jacobi:{WINDOW}",
                 f"r4+budget:tv={d:g},k={{k}}",
                 lossy=True) for d in BUDGETS],
        *methods_2026(),
    ]
    return rows + later_methods() if every else rows


def methods_2026() -> list[Method]:
    """Issue 29's rows (SPEC 10): SJD at SJD-PAC's window, SCD (``principled``; ``gumbel`` and SCD's code's
    ``official`` as variants), SJD-PAC's ablation (+PD, +PD+AC) at L = 32, VVS (every 2nd and 4th step,
    dynamic) with LANTERN's delta on its verify steps, and ours: the budgeted relaxation on SCD's and
    SJD-PAC's windows, and VVS's skips within a TV bound per token (docs/theory.md 15.7, exact verify
    steps). The shipped models' reference decoder runs SJD, SCD, SJD-PAC and VVS; ours run in the worlds
    only (``decoder=False``: the decoder verifies windows by the exact test, and a bounded skip reads the
    target's rows the skip saves)."""
    L = PAC_WINDOW
    return [
        Method(f"SJD L={L}", "jacobi", f"jacobi:{L}", "r2"),
        *[Method("SCD" if c is Coupling.PRINCIPLED else f"SCD, {c} coupling", "scd",
                 f"jacobi:{L},coupled={c}", "r2", lossy=not c.is_lossless)
          for c in (Coupling.PRINCIPLED, Coupling.GUMBEL, Coupling.OFFICIAL)],
        Method("SJD-PAC +PD", "pac", f"pac:{L},ac=off", "r2"),
        Method("SJD-PAC +PD+AC", "pac", f"pac:{L}", "r2"),
        *[Method(f"VVS {name} + LANTERN δ={d}", "vvs", f"vvs:{VVS_TREE},{schedule}",
                 f"r1+lantern:k={{k}},delta={d}", lossy=True)
          for d in VVS_DELTAS
          for name, schedule in [*((f"every {i}", f"uniform={i}") for i in VVS_INTERVALS),
                                 ("dynamic", "dynamic")]],
        *[Method(f"SCD + budget δ={d:g}", "budget-scd", f"jacobi:{L},coupled=principled",
                 f"r2+budget:tv={d:g},k={{k}}", lossy=True, decoder=False) for d in BUDGETS],
        *[Method(f"SJD-PAC + budget δ={d:g}", "budget-pac", f"pac:{L}", f"r2+budget:tv={d:g},k={{k}}",
                 lossy=True, decoder=False) for d in BUDGETS],
        Method(f"VVS every 2, skips within TV {BOUNDED_SKIP_TV:g} (ours)", "vvs-bounded",
               f"vvs:{VVS_TREE},uniform=2,tv={BOUNDED_SKIP_TV:g}", lossy=True, decoder=False),
    ]


def scan_methods() -> list[Method]:
    """SJD and SCD at every window length of :data:`SCAN_WINDOWS` (SPEC 10.1's claim), worlds only."""
    return [Method(f"{name} L={L}", family, f"jacobi:{L}{suffix}", "r2", decoder=False)
            for L in SCAN_WINDOWS
            for name, family, suffix in (("SJD", "jacobi", ""), ("SCD", "scd", ",coupled=principled"))]


def later_methods() -> list[Method]:
    """The methods the frontier study leaves out and ``relaxspec advise`` ranks too: LANTERN++ on EAGLE-2
    (R1), DDD and Sequoia trees, more settings of SCD's and SJD-PAC's windows (SPEC 10.1-10.2) and VVS
    without a relaxation (SPEC 10.3)."""
    return [
        *[Method(f"LANTERN++ λ={lam} (R1, EAGLE-2)", "lantern++-r1", EAGLE2,
                 f"r1+lantern++:k={{k}},lam={lam}", lossy=True) for lam in (2, 5)],
        Method("exact DDD", "ddd", DDD),
        Method("DDD + LANTERN δ=0.2", "ddd", DDD, "r1+lantern:k={k},delta=0.2", lossy=True),
        Method("exact Sequoia", "sequoia", SEQUOIA),
        Method("Sequoia + LANTERN δ=0.2", "sequoia", SEQUOIA, "r1+lantern:k={k},delta=0.2", lossy=True),
        *[Method(f"SCD L={WINDOW}, {c} coupling", "scd", f"jacobi:{WINDOW},coupled={c}", "r2",
                 lossy=not c.is_lossless) for c in (Coupling.PRINCIPLED, Coupling.GUMBEL, Coupling.OFFICIAL)],
        Method(f"SJD-PAC L={WINDOW}", "pac", f"pac:{WINDOW}", "r2"),
        Method(f"SJD-PAC L={WINDOW}, width 2", "pac", f"pac:{WINDOW},width=2", "r2"),
        Method(f"SJD-PAC L={WINDOW}, official siblings", "pac", f"pac:{WINDOW},siblings=official", "r2",
               lossy=True),
        *[Method(f"VVS, verify every {i}", "vvs", f"vvs:{VVS_TREE},uniform={i}", lossy=True) for i in (2, 3)],
        Method("VVS, dynamic", "vvs", f"vvs:{VVS_TREE},dynamic", lossy=True),
    ]


# issue 15's anchors: SJD, GSD, Cool-SD, LANTERN++
ANCHOR_FAMILIES = ("jacobi", "gsd", "cool-sd", "lantern++")
# traversal verification and the budgeted relaxation: a proved TV bound
OUR_FAMILIES = ("r4", "r4-jacobi", "budget", "budget-r4", "budget-jacobi", "budget-scd", "budget-pac",
                "vvs-bounded")
LOSSLESS_2026_FAMILIES = ("scd", "pac")
"""Issue 29's lossless anchors (their principled rows): SCD and SJD-PAC."""
GOAL = 0.15


__all__ = ["ANCHOR_FAMILIES", "BOUNDED_SKIP_TV", "BUDGETS", "COOL_DELTAS", "DDD", "EAGLE2", "GOAL",
           "LOSSLESS_2026_FAMILIES", "Method", "OUR_FAMILIES", "PAC_WINDOW", "REFERENCE_V", "SCAN_WINDOWS",
           "SEQUOIA", "SHIPPED_K", "STATIC", "VVS_DELTAS", "VVS_INTERVALS", "VVS_TREE", "WINDOW", "WORLD_K",
           "later_methods", "methods", "methods_2026", "neighbour_k", "scan_methods"]
