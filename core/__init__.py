"""The pure-NumPy core below ``simulate`` (Numba) and ``reference`` (PyTorch).

It imports neither Numba nor torch, only NumPy and ``theory``:

- :mod:`core.trace`: the trace format (SPEC section 7) and :class:`~core.trace.Sampling`;
- :mod:`core.cost`: the cost model of SPEC section 8 on the packaged latency tables
  (``core/tables``) and the cost-aware tree size;
- :mod:`core.trees`: draft-tree policies, child selection, Sequoia's dynamic program and
  the one tree-spec grammar.
"""
