"""The device verifier's walk of coupled and SJD-PAC windows (reference.verify_columns) takes theory's
decisions (theory.window_walk) decision for decision: float64 on a CPU, random windows with and without
repeated candidates (issue 29 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from frontier_helpers import random_window

from relaxspec.reference.verify import DeviceVerifier
from relaxspec.theory.window_walk import walk_columns


@pytest.mark.parametrize("mode", ["host", "device"])
def test_device_walk_is_theorys_walk(mode: str) -> None:
    rng = np.random.default_rng(1)
    V = 5
    ver = DeviceVerifier("r2", vocab_size=V, mode=mode)
    ends = set()
    for i in range(300):
        cols, tree, p, q, ua, ud = random_window(rng, V, repeats=i % 2 == 0)
        want = walk_columns(p, q, cols, ua, ud)
        ver.link.reset()
        got = ver.columns(torch.from_numpy(p), torch.from_numpy(q), cols, ua, ud)
        assert got == want
        assert ver.link.syncs == len(want[0]) - (want[1] < 0)  # one read per column visited
        ends.add((want[1] < 0, len(want[0])))
    assert len(ends) >= 5  # residual draws and full passes at several depths


def test_columns_need_unboosted_r2_and_valid_inputs() -> None:
    cols = np.array([[1, -1]])
    p, q = torch.full((2, 3), 1 / 3, dtype=torch.float64), torch.full((1, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="unboosted sampled-draft test"):
        DeviceVerifier("r2+cool:omega=2", vocab_size=3).columns(p, q, cols, np.zeros(2), np.zeros(2))
    ver = DeviceVerifier("r2", vocab_size=3)
    with pytest.raises(ValueError, match="u_draw must hold 2 uniforms"):
        ver.columns(p, q, cols, np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="columns hold tokens outside"):
        ver.columns(p, q, np.array([[3, -1]]), np.zeros(2), np.zeros(2))
