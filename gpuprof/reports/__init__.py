"""Renderers: text tables for the terminal, figures and the self-contained HTML report, and the
exports other tools read (Prometheus textfile, nccl-tests' output layout).

May import advice, the predictor, analysis, runs and the foundations; never torch."""
