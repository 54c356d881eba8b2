"""Autoregressive and speculative decoding of one image (batch 1; CFG doubles it internally).

Every step is a draft tree verified where the logits are, by
:class:`reference.verify.DeviceVerifier` (``DecodeSettings.verifier = "device"``, the default; float64
unless ``verify_dtype`` asks for float32): only the accepted path and the bonus token come back to the host
(``StepStats.host_bytes`` counts what does). ``verifier = "theory"`` is the oracle: the guided logits of
every node cross to the host and ``theory.rule_step.sample_rule_step`` verifies them in float64 (on CPU in
float64 both take the same decisions). The root is the
last committed token (at the first step, the class token, with no drafts: the
prefill), the target runs the whole tree in one forward, and its guided logits
at every node (uncond + s (cond - uncond), LlamaGen's formula) are rounded to the
trace dtype before they become p (``theory.logits_to_probs``'s law), so
a trace replays bit for bit. Drafts come from a tree policy (``simulate``'s
builders) calling a :class:`~reference.drafter.DraftSession` through a
callback that does the same for q on the host (the policies are NumPy; the
draft rows a step verifies go to the device). Autoregressive sampling is the same loop
with one-node trees.

Uniforms come from ``numpy.random.default_rng(SeedSequence([seed, sequence]))``,
per step in this order: the policy's uniforms (R2's draws without
replacement: one per template node of the static tree), then ``u_accept`` and
``u_draw`` (one per tree node).

``DecodeSettings.verification`` is the rule, its relaxation or boost and its variant as one value
(:class:`theory.verification.Verification`, or its spec string). R2 takes a boost (GSD's group or
Cool-SD's
depth-scaled acceptance, SPEC 9.2-9.3, verified by theory with the boost; a
tree node's children are tested at depth ``depth + 1``); GSD reads an embedding
table (:func:`gsd_embedding`: the target's ``tok_embeddings`` or the VQ
codebook), rounded to float32 so that a trace stores exactly the table used.

Rule r4 (traversal verification, SPEC 9.6) verifies the same sampled-draft
trees and windows as R2 (children drawn from q without replacement, the same
policy uniforms), through ``theory.traversal.sample_traversal_step`` in float64
on the host; the budget (``r2+budget:tv=..,k=..``, SPEC 9.5) relaxes R2
(``theory.budget.sample_budget_r2_step``) or R4 with the neighbour table the
decoder holds for LANTERN relaxations. ``theory.rule_step`` sends each step to
its oracle. R4's uniforms are R2's: ``u_accept[v]`` is node v's eta (a node is
tested at most once), ``u_draw[v]`` draws the bonus from P_v when the step ends
at v (the root when every path is rejected).

Jacobi windows (SJD, SPEC 9.1; the policy ``jacobi:L[,fresh]``, no drafter):
every step, the first included, is one target forward over the chain [root,
d_1..d_L'] with L' = min(L, tokens left - 1) (root: the class token at the
first step, else the last committed token; the KV cache keeps the root and the
accepted drafts, as for a tree's accepted path). The drafts are the tokens the
previous forward sampled after its emitted token, with q := the target row
they were drawn from, then fresh tokens (``reference.jacobi.Kept``); the window
is verified by ``theory.jacobi_sampler.verify_window`` (boosted when asked,
Cool-SD's depth = window position; R4 and the budget verify the same chain:
``theory.rule_step.sample_window_step``) and emits accepted + 1 tokens. Uniforms
per forward, in order: ``u_fresh`` (L: the fresh tokens of this forward's
window), ``u_accept`` and ``u_draw`` (one per chain node; node j >= 1 is d_j:
``u_accept[j]`` tests it, ``u_draw[j]`` draws the residual or t_{j+1} after
it, ``u_draw[0]`` the residual at d_1 or t_1; ``u_accept[0]`` is unused; with
R4 ``u_accept[j]`` is d_j's eta and ``u_draw[j]`` draws the bonus from P_j when
the step ends at node j, else t_{j+1}). A
trace records the window as a chain whose node j - 1 holds the stored logits
of q_j (``core.trace``), with ``u_fresh``.

SPEC 10's methods run their own loops with this decoder's forward, verifiers and drafting: SCD's coupled
windows and SJD-PAC's windows (``jacobi:L,coupled=..``, ``pac:..``; no drafter, rule r2) in
``reference.decode_columns``, VVS's skipped verification (``vvs:..``; a drafter, rule r1; the dynamic
schedule reads ``codes``, the VQ codebook) in ``reference.decode_vvs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from relaxspec.core.trace import LOGIT_DTYPES, Sampling, TraceStep, TraceWriter
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.policies import TreePolicy
from relaxspec.core.trees.skips import VvsTree
from relaxspec.core.trees.spec import draft_source
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.reference.coupled import WindowPlan
from relaxspec.reference.decode_columns import ColumnsDecoding
from relaxspec.reference.decode_stats import DecodeResult, StepStats
from relaxspec.reference.decode_vvs import VvsDecoding
from relaxspec.reference.draft_tree import TreeDrafting
from relaxspec.reference.drafter import DraftSession
from relaxspec.reference.frontier import DEFAULT_TREE_NODES, check_frontier, tree_nodes_needed
from relaxspec.reference.jacobi import Kept
from relaxspec.reference.model import Transformer
from relaxspec.reference.verify import DeviceVerifier
from relaxspec.theory.boost import EMBEDDINGS
from relaxspec.theory.rule_step import (
    sample_rule_step,
    sample_window_step,
    step_neighbours,
)
from relaxspec.theory.rules import boost_embedding
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification

VERIFIERS = ("device", "theory")
"""``device``: :class:`reference.verify.DeviceVerifier` where the logits are (the default); ``theory``:
theory's oracle in float64 on the host (the logits of every node cross to the host)."""
VERIFY_DTYPES = {"float64": torch.float64, "float32": torch.float32}
TORCH_LOGITS = {"float16": torch.float16, "float32": torch.float32}


def gsd_embedding(choice: str, target: Transformer, codebook: np.ndarray | torch.Tensor | None = None
                  ) -> np.ndarray:
    """GSD's embedding table (V, dim) as float64: the target's token embedding (``token``, LlamaGen's
    ``tok_embeddings``) or the VQ codebook (``codebook``: ``VQModel.codebook()``, the code vectors as
    the quantiser uses them), each rounded to float32 (what a trace stores).

    Raises
    ------
    ValueError
        For another choice, a missing codebook, or a table whose vocabulary differs from the target's.
    """
    if choice not in EMBEDDINGS:
        raise ValueError(f"the GSD embedding must be one of {EMBEDDINGS}, got {choice!r}")
    if choice == "token":
        table = target.tok_embeddings.weight.detach().float().cpu().numpy()
    elif codebook is None:
        raise ValueError("the GSD embedding 'codebook' needs the VQ codebook")
    else:
        table = (codebook.detach().float().cpu().numpy() if isinstance(codebook, torch.Tensor)
                 else np.asarray(codebook, dtype=np.float32))
    V = target.cfg.vocab_size
    if table.ndim != 2 or table.shape[0] != V:
        raise ValueError(f"the GSD embedding ({choice}) has shape {table.shape} but the model has {V} "
                         "tokens: an embedding table of another vocabulary size")
    return table.astype(np.float32).astype(np.float64)


def guide(raw: torch.Tensor, cfg_scale: float) -> torch.Tensor:
    """Classifier-free guidance on a CFG batch (cond, uncond) of logits; batch 1 passes through."""
    if raw.shape[0] == 1:
        return raw[0]
    cond, uncond = raw[0], raw[1]
    return uncond + (cond - uncond) * cfg_scale


@dataclass(frozen=True)
class DecodeSettings:
    """The verification (rule, relaxation or boost, variant: one value, or its spec string), sampling,
    guidance and trace precision."""

    verification: Verification = Verification()
    target_sampling: Sampling = field(default_factory=Sampling)
    draft_sampling: Sampling = field(default_factory=Sampling)
    cfg_scale: float = 1.0
    logits_dtype: str = "float32"
    max_tree_nodes: int = DEFAULT_TREE_NODES
    verifier: str = "device"
    verify_dtype: str = "float64"

    def __post_init__(self) -> None:
        object.__setattr__(self, "verification", Verification.parse(self.verification))  # a spec string too
        if not np.isfinite(self.cfg_scale) or self.cfg_scale < 1.0:
            raise ValueError(f"cfg_scale must be >= 1 (1 = no guidance), got {self.cfg_scale!r}")
        if self.logits_dtype not in LOGIT_DTYPES:
            raise ValueError(f"logits_dtype must be one of {LOGIT_DTYPES}, got {self.logits_dtype!r}")
        if self.max_tree_nodes < 1:
            raise ValueError("max_tree_nodes must be >= 1")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"verifier must be one of {VERIFIERS}, got {self.verifier!r}")
        if self.verify_dtype not in VERIFY_DTYPES:
            raise ValueError(f"verify_dtype must be one of {tuple(VERIFY_DTYPES)}, got {self.verify_dtype!r}")

    @property
    def guided(self) -> bool:
        return self.cfg_scale > 1.0


class Decoder(TreeDrafting, ColumnsDecoding, VvsDecoding):
    """Generate images token by token (``drafter=None``), speculatively with a drafter and a tree
    ``policy``, or with Jacobi windows (``policy`` a :class:`~core.trees.jacobi.JacobiWindow`, no
    drafter). ``embedding`` is GSD's table (:func:`gsd_embedding`) when the settings' boost is ``gsd``."""

    def __init__(self, target: Transformer, settings: DecodeSettings, *, drafter: DraftSession | None = None,
                 policy: TreePolicy | None = None, neighbours: np.ndarray | None = None,
                 embedding: np.ndarray | None = None, codes: np.ndarray | None = None) -> None:
        self.jacobi = policy if isinstance(policy, JacobiWindow) else None
        self.columns_plan = WindowPlan.of(policy) if isinstance(policy, CoupledWindow | PacWindow) else None
        self.vvs = policy if isinstance(policy, VvsTree) else None
        if self.jacobi is not None:
            _check_jacobi(self.jacobi, settings, drafter)
        elif (drafter is None) != (policy is None):
            raise ValueError("speculative decoding needs both a drafter and a tree policy")
        settings.verification.check_source(draft_source(policy), f"tree {policy or 'ar'}")
        self.codes = check_frontier(policy, settings.verification, codes, target.cfg.vocab_size)
        self.code_table = None if codes is None else np.asarray(codes, dtype=np.float32)  # a trace stores it
        if drafter is not None and getattr(drafter, "vocab_size", None) != target.cfg.vocab_size:
            raise ValueError(f"drafter vocabulary {getattr(drafter, 'vocab_size', None)} differs from the "
                             f"target's {target.cfg.vocab_size}")
        self.target, self.settings, self.drafter, self.policy = target, settings, drafter, policy
        self.vocab = target.cfg.vocab_size
        v = settings.verification
        self.neighbours = step_neighbours(neighbours, self.vocab, v)
        self.device = next(target.parameters()).device
        if embedding is not None and not v.reads_embedding:
            raise ValueError(f"an embedding table is read only by the gsd boost, not by {v}")
        self.embedding = boost_embedding(v.boost, embedding, self.vocab)
        emb = self.embedding
        if emb is not None and not np.array_equal(emb.astype(np.float32), emb):
            raise ValueError("the GSD embedding table must hold float32 values (a trace stores float32): "
                             "build it with reference.decode.gsd_embedding")
        self.verifier = None if settings.verifier == "theory" else DeviceVerifier(
            v, vocab_size=self.vocab,
            neighbours=neighbours, embedding=self.embedding, device=self.device,
            dtype=VERIFY_DTYPES[settings.verify_dtype])
        batch = 2 if settings.guided else 1
        needed = tree_nodes_needed(policy)
        if needed > settings.max_tree_nodes:
            raise ValueError(f"{policy} runs up to {needed} nodes in one target forward: it needs "
                             f"max_tree_nodes >= {needed}, got {settings.max_tree_nodes}")
        target.setup_cache(batch, settings.max_tree_nodes)
        if drafter is not None:
            drafter.setup(batch, settings.max_tree_nodes)

    # -- logits -> probabilities through the trace dtype --------------------------------------
    def _guided(self, raw: torch.Tensor) -> torch.Tensor:
        """Guided logits (n, V) on the device, rounded to the trace dtype (float32 first: the model's
        logits are float32 whatever its weights)."""
        return guide(raw, self.settings.cfg_scale).float().to(TORCH_LOGITS[self.settings.logits_dtype])

    def _stored(self, raw: torch.Tensor) -> np.ndarray:
        """Guided logits (n, V) as the trace stores them."""
        return self._guided(raw).cpu().numpy()

    def _device_probs(self, stored: torch.Tensor, sampling: Sampling, what: str) -> torch.Tensor:
        """The device verifier's probabilities of stored logits (theory's law, on the device)."""
        try:
            return self.verifier.probs(stored, sampling)
        except ValueError as err:
            raise ValueError(f"{what} logits are invalid: {err}") from err

    def _probs(self, stored: np.ndarray, sampling: Sampling, what: str) -> np.ndarray:
        try:
            return sampling.probs(stored.astype(np.float64))
        except ValueError as err:
            raise ValueError(f"{what} logits are invalid: {err}") from err

    def _labels(self, label: int) -> torch.Tensor:
        cfg = self.target.cfg
        if not 0 <= label < cfg.class_rows:  # label num_classes (the null class): unconditional
            raise ValueError(f"class label {label} is out of range [0, {cfg.class_rows})")
        labels = [label, cfg.null_class] if self.settings.guided else [label]
        return torch.tensor(labels, device=self.device)

    def _sync(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _forward(self, labels: torch.Tensor, parents: np.ndarray, tokens: np.ndarray, first: bool,
                 prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One target forward over a tree (at the first step node 0 is the class token, whatever
        ``tokens[0]`` holds): its hidden states and guided logits (trace dtype), both on the device."""
        tgt, n, B = self.target, len(parents), labels.shape[0]
        if first:  # the class token, then (Jacobi) the first window's drafts
            x = tgt.embed_class(labels)
            if n > 1:
                drafts = tgt.embed_tokens(torch.as_tensor(np.array(tokens[1:]), device=self.device))
                x = torch.cat([x, drafts[None].expand(B, -1, -1)], dim=1)
        else:
            tok = torch.as_tensor(np.array(tokens), device=self.device)
            x = tgt.embed_tokens(tok)[None].expand(B, -1, -1)
        hidden = tgt.forward_tree(x, parents, np.arange(n), prefix)
        return hidden, self._guided(tgt.logits(hidden))

    # -- one sequence -------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, label: int, seed: int, sequence: int = 0, trace: TraceWriter | None = None
                 ) -> DecodeResult:
        """Generate the grid^2 image tokens of class ``label``; ``sequence`` keys the uniforms."""
        if self.columns_plan is not None:
            return self._generate_columns(label, seed, sequence, trace)
        if self.vvs is not None:
            return self._generate_vvs(label, seed, sequence, trace)
        st, tgt = self.settings, self.target
        N, V = tgt.cfg.block_size, self.vocab
        rng = np.random.default_rng(np.random.SeedSequence([seed, sequence]))
        labels = self._labels(label)
        stats: list[StepStats] = []
        tokens: list[int] = []
        prefix = 0
        chain: list[int] = []
        chain_features: torch.Tensor | None = None
        kept = Kept.nothing(V, st.logits_dtype)
        if self.drafter is not None:
            self.drafter.reset(labels)
        while len(tokens) < N:
            t0 = self._sync()
            first = not tokens
            root = label if first else tokens[-1]
            draft_rows: dict[int, np.ndarray] = {}
            located, u_fresh = None, np.zeros(0)
            if self.jacobi is not None:
                u_fresh = rng.random(self.jacobi.window)
                tree, draft_rows = self._window(root, kept, u_fresh, N - len(tokens) - 1)
                draft_calls = 0
            elif self.drafter is None or first or len(tokens) == N - 1:  # prefill, plain AR, last token
                tree, draft_calls = Tree(np.array([-1]), np.array([root])), 0
            else:
                tree, draft_calls, located, draft_rows = self._draft_tree(root, chain, chain_features,
                                                                          N - len(tokens) - 1, rng)
            t1 = self._sync()
            n = tree.size
            position = prefix
            hidden, guided = self._forward(labels, tree.parents, tree.tokens, first, prefix)
            t2 = self._sync()
            draft_stored = np.zeros((n, V), dtype=st.logits_dtype)
            for v, row in draft_rows.items():
                draft_stored[v] = row
            u_accept, u_draw = rng.random(n), rng.random(n)
            what = f"target (step {len(stats)})"
            path, bonus, target_stored, host_bytes, p = self._verify(
                tree, guided, draft_stored, draft_rows, u_accept, u_draw, what,
                keep_rows=trace is not None or self.jacobi is not None)
            if self.verifier is not None and self.jacobi is not None:  # kept samples are drawn on the host
                host_bytes += target_stored.nbytes
            t3 = self._sync()
            prefix = tgt.accept_path(prefix, path)
            new = [int(t) for t in tree.tokens[path[1:]]] + [int(bonus)]
            if trace is not None:
                trace.add(TraceStep(sequence=sequence, position=position, parents=tree.parents,
                                    tokens=tree.tokens, target_logits=target_stored,
                                    draft_logits=draft_stored, u_accept=u_accept, u_draw=u_draw,
                                    path=path, bonus=int(bonus), u_fresh=u_fresh))
            if located is not None:
                self.drafter.accept(located(path))
            if self.jacobi is not None:  # SJD keeps the window's samples: its rows on the host
                p = self._probs(target_stored, st.target_sampling, what) if p is None else p
                kept = Kept.after(p, target_stored, len(path) - 1, u_draw, int(bonus))
            chain = new
            chain_features = hidden[:, torch.as_tensor(path, device=self.device)]
            tokens.extend(new)
            stats.append(StepStats(sequence, len(stats), position, n, tree.depth, draft_calls,
                                   len(path) - 1, len(new), t1 - t0, t2 - t1, t3 - t2, int(host_bytes)))
        if trace is not None:
            trace.end_sequence()
        return DecodeResult(np.array(tokens[:N], dtype=np.int64), stats)

    def _verify(self, tree: Tree, guided: torch.Tensor, draft_stored: np.ndarray,
                draft_rows: dict[int, np.ndarray], u_accept: np.ndarray, u_draw: np.ndarray, what: str,
                keep_rows: bool) -> tuple[np.ndarray, int, np.ndarray | None, int, np.ndarray | None]:
        """One step verified on the host (:meth:`_verify_on_host`) or the device (:meth:`_verify_on_device`):
        its path and bonus, the target rows on the host (None where the device verified them and
        ``keep_rows`` is false), the bytes read to the host, and p where the host computed it."""
        if self.verifier is None:
            target_stored = guided.cpu().numpy()
            p = self._probs(target_stored, self.settings.target_sampling, what)
            path, bonus = self._verify_on_host(tree, p, draft_stored, draft_rows, u_accept, u_draw)
            return path, bonus, target_stored, target_stored.nbytes, p
        self.verifier.link.reset()
        path, bonus = self._verify_on_device(tree, guided, draft_stored, draft_rows, u_accept, u_draw, what)
        return path, bonus, guided.cpu().numpy() if keep_rows else None, self.verifier.link.bytes, None

    def _verify_on_host(self, tree: Tree, p: np.ndarray, draft_stored: np.ndarray,
                        draft_rows: dict[int, np.ndarray], u_accept: np.ndarray, u_draw: np.ndarray
                        ) -> tuple[np.ndarray, int]:
        """``--verifier theory``: the step verified by theory's oracle in float64 on the host (``p``: the
        target's probabilities)."""
        st, ver = self.settings, self.settings.verification
        q = None
        if ver.samples_drafts and draft_rows:
            q = np.zeros_like(p)
            for v in draft_rows:
                q[v] = self._probs(draft_stored[v], st.draft_sampling, "draft")
        if self.jacobi is not None and tree.size > 1:
            accepted, bonus = sample_window_step(p, tree.tokens[1:], q[:-1], u_accept[1:], u_draw, ver,
                                                 neighbours=self.neighbours, emb=self.embedding)
            return np.arange(accepted + 1, dtype=np.int64), int(bonus)
        path, bonus = sample_rule_step(tree, p, u_accept, u_draw, ver, neighbours=self.neighbours, q_dists=q,
                                       emb=self.embedding)
        return np.asarray(path, dtype=np.int64), int(bonus)

    def _verify_on_device(self, tree: Tree, guided: torch.Tensor, draft_stored: np.ndarray,
                          draft_rows: dict[int, np.ndarray], u_accept: np.ndarray, u_draw: np.ndarray,
                          what: str) -> tuple[np.ndarray, int]:
        """The step verified by :class:`reference.verify.DeviceVerifier` where the logits are; only the
        accepted path and the bonus token come back (the draft rows, computed on the host by the tree
        policies, go to the device)."""
        st, ver = self.settings, self.verifier
        p = self._device_probs(guided, st.target_sampling, what)
        q = None
        if st.verification.samples_drafts and draft_rows:
            rows = sorted(draft_rows)
            q = torch.zeros_like(p)
            q[rows] = self._device_probs(torch.from_numpy(draft_stored[rows]).to(self.device),
                                         st.draft_sampling, "draft")
        ua = torch.from_numpy(u_accept).to(self.device)
        ud = torch.from_numpy(u_draw).to(self.device)
        if self.jacobi is not None and tree.size > 1:
            accepted, bonus = ver.window(p, tree.tokens[1:], q[:-1], ua[1:], ud)
            return np.arange(accepted + 1, dtype=np.int64), int(bonus)
        path, bonus = ver.step(tree, p, ua, ud, q, checked=True)  # rows made by ver.probs
        return np.asarray(path, dtype=np.int64), int(bonus)

    def _window(self, root: int, kept: Kept, u_fresh: np.ndarray, max_depth: int
                ) -> tuple[Tree, dict[int, np.ndarray]]:
        """This forward's Jacobi chain [root, d_1..d_L'] (L' = min(L, ``max_depth``)) and the stored q
        logits of d_j at node j - 1."""
        drafts, q_logits = kept.window(self.jacobi.window, self.jacobi.fresh, u_fresh)
        m = min(self.jacobi.window, max_depth)
        tree = Tree(np.arange(-1, m, dtype=np.int64), np.concatenate([[root], drafts[:m]]).astype(np.int64))
        return tree, {j: q_logits[j] for j in range(m)}

    def _draft_tree(self, root: int, chain: list[int], chain_features: torch.Tensor, max_depth: int,
                    rng: np.random.Generator) -> tuple[Tree, int, Callable, dict[int, np.ndarray]]:
        """Run the policy with the drafter (``reference.draft_tree.TreeDrafting._draft``, its last partial
        tree dropped)."""
        return self._draft(root, chain, chain_features, max_depth, rng)[:4]


def _check_jacobi(policy: JacobiWindow, settings: DecodeSettings, drafter: DraftSession | None) -> None:
    """Raise unless a Jacobi window can run with these settings: no drafter, and q sampled as the target
    is (a kept draft's q is its target row); the rule it needs: ``Verification.source_problem``."""
    if drafter is not None:
        raise ValueError(f"{policy} drafts from the target's own samples: it takes no drafter")
    if settings.draft_sampling != settings.target_sampling:
        raise ValueError(f"{policy}: a kept draft's q is the target row it was drawn from, so the draft "
                         f"sampling {settings.draft_sampling} must equal the target's "
                         f"{settings.target_sampling}")
