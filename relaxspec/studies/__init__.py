"""Analyses built on the suite (each runnable as ``python -m relaxspec.studies.NAME``)."""
