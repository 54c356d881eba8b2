"""relaxspec: exact analysis, simulation and a reference decoder for relaxed speculative decoding."""

__version__ = "0.1.0"
