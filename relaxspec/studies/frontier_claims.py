"""The frontier comparison's claims, computed from its rows (:mod:`relaxspec.studies.frontier`).

A row is a dict with ``setting`` (a world, or a shipped model: ``shipped``, ``shipped ambiguous``),
``method`` (a :class:`Method` label), ``family``, ``tokens`` (per target forward), ``se`` (its standard error
over sequences, worlds) and ``tv`` (exact TV per token; the proved bound for ours; NaN where none is
known; shipped rows: the TV bound per image), ``lossy`` (whether the method is lossless by theorem) and,
shipped, ``fd``.
Each claim is one Markdown line with its numbers and a bold verdict.

- Issues 14-15 (:func:`verdicts`, :func:`budget_claims`): GSD > SJD > AR; Cool-SD against LANTERN++ at
  equal FD; the best rule with a proved per-node TV bound against the best anchor.
- Issue 29 (:func:`claims_2026`): SCD's tokens per forward rising with the window L while SJD's stay flat
  (:data:`RISE`); SJD < +PD < +PD+AC at L = 32; VVS above LANTERN at the same delta, with its exact TV;
  and the goal line, our best rule with a proved TV bound against the best lossless anchor (SCD or
  SJD-PAC), +15%.
"""

from __future__ import annotations

import numpy as np

from relaxspec.studies.frontier_methods import (
    ANCHOR_FAMILIES,
    BUDGETS,
    GOAL,
    LOSSLESS_2026_FAMILIES,
    OUR_FAMILIES,
    PAC_WINDOW,
    SCAN_WINDOWS,
    VVS_DELTAS,
)

RISE = 0.10
"""SCD's claim: tokens per forward "rise" from the smallest to the largest window when they grow by at least
10%, and SJD's stay "flat" when they change by less (the paper: SJD 2.31x at L = 32 and NFE 2390 -> 1036 at
L = 64, SCD -> 568)."""


def _by(rows: list[dict], setting: str) -> dict[str, dict]:
    return {r["method"]: r for r in rows if r["setting"] == setting}


def _verdict(holds: bool) -> str:
    return f"**{'holds' if holds else 'fails'}**"


def _goal(gain: float) -> str:
    return f"{100 * gain:+.1f}% (goal +{100 * GOAL:.0f}%: **{'met' if gain >= GOAL else 'not met'}**)"


def _fmt(r: dict) -> str:
    se = r.get("se", float("nan"))
    return f"{r['tokens']:.3f}" + (f" ± {se:.3f}" if np.isfinite(se) else "")


def settings_of(rows: list[dict]) -> list[str]:
    """The settings the rows hold, in first-appearance order."""
    return list(dict.fromkeys(r["setting"] for r in rows))


# ---------------------------------------------------------------- issues 14 and 15
def is_shipped(setting: str) -> bool:
    """Whether a setting is a shipped model's (its rows carry FD) rather than a world's."""
    return setting.startswith("shipped")


def verdicts(rows: list[dict], floors: dict[str, float] | None) -> list[str]:
    """Issue 14's claims, each checked on every setting with numbers: GSD > SJD > AR in tokens per forward;
    on a shipped model, Cool-SD > LANTERN++ at equal FD (within its noise floor, ``floors[setting]``)."""
    lines = []
    for name in settings_of(rows):
        by = _by(rows, name)
        if not {"SJD", "AR"} <= by.keys():
            continue
        gsd = max((r for k, r in by.items() if k.startswith("GSD")), key=lambda r: r["tokens"], default=None)
        sjd, ar = by["SJD"]["tokens"], by["AR"]["tokens"]
        if gsd is not None:
            lines.append(f"- {name}: GSD > SJD > AR in tokens per forward: "
                         f"{_verdict(gsd['tokens'] > sjd > ar)} "
                         f"(best GSD {gsd['tokens']:.3f}, SJD {sjd:.3f}, AR {ar:.3f}).")
    for name, floor in (floors or {}).items():
        by = _by(rows, name)
        for cs in (r for k, r in by.items() if k.startswith("Cool-SD")):
            peers = [r for k, r in by.items()
                     if k.startswith("LANTERN++") and abs(r["fd"] - cs["fd"]) <= floor]
            if not peers:
                lines.append(f"- {name}: {cs['method']} (FD {cs['fd']:.2f}) has no LANTERN++ row within the "
                             f"noise floor {floor:.2f} of its FD: no comparison at equal FD.")
                continue
            best = max(peers, key=lambda r: r["tokens"])
            lines.append(f"- {name}: {cs['method']} > LANTERN++ at equal FD (within {floor:.2f}): "
                         f"{_verdict(cs['tokens'] > best['tokens'])} ({cs['tokens']:.3f} vs "
                         f"{best['method']} {best['tokens']:.3f} tokens per forward; FD "
                         f"{cs['fd']:.2f} vs {best['fd']:.2f}).")
    return lines


def budget_claims(rows: list[dict], floors: dict[str, float] | None) -> list[str]:
    """Issue 15's goal: the best configuration with a proved per-node TV bound (traversal R4, the budgeted
    relaxation) against the best anchor (SJD, GSD, Cool-SD, LANTERN++), within the anchor's TV per token
    (worlds; LANTERN++'s relaxed R2 has no computable TV at V = 16384, so it is compared at any budget and
    said so) and at equal or better FD within the noise floor (shipped)."""
    lines = []
    for w in (s for s in settings_of(rows) if not is_shipped(s)):
        here = [r for r in rows if r["setting"] == w]
        anchors = [r for r in here if r["family"] in ANCHOR_FAMILIES]
        mine = [r for r in here if r["family"] in OUR_FAMILIES]
        if not anchors or not mine:
            continue
        bounded = [r for r in anchors if np.isfinite(r["tv"])]
        if bounded:
            a = max(bounded, key=lambda r: r["tokens"])
            within = [r for r in mine if r["tv"] <= a["tv"] + 1e-12]
            if within:
                o = max(within, key=lambda r: r["tokens"])
                lines.append(f"- {w}: at TV per token <= {a['tv']:.4f} (the best anchor with a known TV, "
                             f"{a['method']}, {a['tokens']:.3f} tokens per forward): {o['method']} "
                             f"{o['tokens']:.3f} (TV {o['tv']:.4f}): {_goal(o['tokens'] / a['tokens'] - 1)}.")
            else:
                lines.append(f"- {w}: no configuration of ours within {a['method']}'s TV per token "
                             f"{a['tv']:.4f}.")
        unbounded = [r for r in anchors if not np.isfinite(r["tv"])]
        if unbounded:
            a, o = max(unbounded, key=lambda r: r["tokens"]), max(mine, key=lambda r: r["tokens"])
            lines.append(f"- {w}: against {a['method']} ({a['tokens']:.3f}; its TV is not computable, so at "
                         f"no equal budget): our best {o['method']} {o['tokens']:.3f} (TV {o['tv']:.4f}): "
                         f"{100 * (o['tokens'] / a['tokens'] - 1):+.1f}%.")
    for name, floor in (floors or {}).items():
        shipped = [r for r in rows if r["setting"] == name]
        anchors = [r for r in shipped if r["family"] in ANCHOR_FAMILIES]
        if anchors:
            a = max(anchors, key=lambda r: r["tokens"])
            mine = [r for r in shipped if r["family"] in OUR_FAMILIES and r["fd"] <= a["fd"] + floor]
            if mine:
                o = max(mine, key=lambda r: r["tokens"])
                lines.append(f"- {name}: at FD <= {a['fd']:.2f} + {floor:.2f} (the best anchor, "
                             f"{a['method']}, {a['tokens']:.3f} tokens per forward, plus the noise floor): "
                             f"{o['method']} {o['tokens']:.3f} (FD {o['fd']:.2f}): "
                             f"{_goal(o['tokens'] / a['tokens'] - 1)}.")
            else:
                lines.append(f"- {name}: no configuration of ours within the noise floor of "
                             f"{a['method']}'s FD.")
    return lines


# ---------------------------------------------------------------- issue 29
def window_claim(scan: dict[str, dict], name: str) -> str | None:
    """SCD's claim in one setting (``scan``: its rows by label, ``SJD L=8`` .. ``SCD L=64``)."""
    labels = [f"{m} L={L}" for m in ("SJD", "SCD") for L in SCAN_WINDOWS]
    if not set(labels) <= scan.keys():
        return None
    sjd = [scan[f"SJD L={L}"]["tokens"] for L in SCAN_WINDOWS]
    scd = [scan[f"SCD L={L}"]["tokens"] for L in SCAN_WINDOWS]
    rise, drift = scd[-1] / scd[0] - 1, sjd[-1] / sjd[0] - 1
    holds = rise >= RISE and abs(drift) < RISE
    Ls = "/".join(str(L) for L in SCAN_WINDOWS)
    return (f"- {name}: SCD's tokens per forward rise with L while SJD's stay flat (L = {Ls}; rise: "
            f"+{100 * RISE:.0f}% or more from the first to the last, flat: less): {_verdict(holds)} (SJD "
            f"{', '.join(f'{x:.3f}' for x in sjd)}, {100 * drift:+.1f}%; SCD "
            f"{', '.join(f'{x:.3f}' for x in scd)}, {100 * rise:+.1f}%).")


def claims_2026(rows: list[dict], scan: list[dict], floors: dict[str, float] | None) -> list[str]:
    """Issue 29's claims (module docstring) on every setting the rows hold; ``scan``: the window-length
    scan's rows (:func:`relaxspec.studies.frontier_methods.scan_methods`)."""
    lines = []
    for name in settings_of(rows + scan):
        line = window_claim(_by(scan, name), name)
        if line:
            lines.append(line)
        by = _by(rows, name)
        chain = [f"SJD L={PAC_WINDOW}", "SJD-PAC +PD", "SJD-PAC +PD+AC"]
        if set(chain) <= by.keys():
            t = [by[k] for k in chain]
            holds = t[0]["tokens"] < t[1]["tokens"] < t[2]["tokens"]
            lines.append(f"- {name}: SJD < +PD < +PD+AC at L = {PAC_WINDOW} (paper: 2.31 < 2.71 < 3.52): "
                         f"{_verdict(holds)} ({', '.join(_fmt(r) for r in t)}).")
        for d in VVS_DELTAS:
            lantern = by.get(f"LANTERN δ={d}")
            vvs = [r for k, r in by.items() if k.startswith("VVS ") and k.endswith(f"LANTERN δ={d}")]
            if lantern is None or not vvs:
                continue
            holds = all(r["tokens"] > lantern["tokens"] for r in vvs)
            parts = ", ".join(f"{r['method'].split(' + ')[0]} {r['tokens']:.3f} (TV {r['tv']:.4f})"
                              for r in vvs)
            unit = ("TV bound per image: the sum over its steps, exact for VVS's skipped tokens"
                    if is_shipped(name) else "exact TV per token, VVS's skipped tokens included")
            lines.append(f"- {name}: VVS above LANTERN at δ = {d} in tokens per forward: {_verdict(holds)} "
                         f"(LANTERN {lantern['tokens']:.3f}, TV {lantern['tv']:.4f}; {parts}; {unit}).")
        line = goal_line(by, name, (floors or {}).get(name))
        if line:
            lines.append(line)
    return lines


def goal_line(by: dict[str, dict], name: str, floor: float | None) -> str | None:
    """Issue 29's goal in one setting: our best rule with a proved TV bound against the best lossless anchor
    (SCD or SJD-PAC, principled), in tokens per forward, and our best within the smallest budget's TV per
    token (worlds); on the shipped model, at FD within the noise ``floor`` of the anchor's."""
    anchors = [r for r in by.values() if r["family"] in LOSSLESS_2026_FAMILIES and not r.get("lossy", False)]
    mine = [r for r in by.values() if r["family"] in OUR_FAMILIES and np.isfinite(r["tv"])]
    if not anchors or not mine:
        return None
    a = max(anchors, key=lambda r: r["tokens"])
    head = (f"- {name}: issue 29's goal, our best rule with a proved TV bound against the best lossless "
            f"anchor ({a['method']}, {_fmt(a)}): ")
    if is_shipped(name):
        if floor is None:
            return None
        mine = [r for r in mine if r["fd"] <= a["fd"] + floor]
        if not mine:
            return head + f"no rule of ours within the noise floor {floor:.2f} of its FD {a['fd']:.2f}."
        o = max(mine, key=lambda r: r["tokens"])
        return head + (f"{o['method']} {_fmt(o)} (FD {o['fd']:.2f}, within {floor:.2f} of {a['fd']:.2f}): "
                       f"{_goal(o['tokens'] / a['tokens'] - 1)}.")
    o = max(mine, key=lambda r: r["tokens"])
    line = head + (f"{o['method']} {_fmt(o)} (TV per token {o['tv']:.4f}): "
                   f"{_goal(o['tokens'] / a['tokens'] - 1)}")
    small = [r for r in mine if r["tv"] <= min(BUDGETS) + 1e-12]
    if small:
        s = max(small, key=lambda r: r["tokens"])
        line += (f"; within TV {min(BUDGETS):g} per token: {s['method']} {_fmt(s)} (TV {s['tv']:.4f}): "
                 f"{100 * (s['tokens'] / a['tokens'] - 1):+.1f}%")
    return line + "."


__all__ = ["RISE", "budget_claims", "claims_2026", "goal_line", "is_shipped", "settings_of", "verdicts",
           "window_claim"]
