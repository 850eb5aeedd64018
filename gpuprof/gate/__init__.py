"""The regression gate: baseline files, `check` against a baseline, `compare` and `trend`,
their statistics and verdict formats (terminal, JSON, JUnit, Markdown, HTML).

May import reports, analysis, runs and the foundations; never torch."""
