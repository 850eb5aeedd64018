"""Renderers: text tables for the terminal, figures and the self-contained HTML report."""
