"""The advice layer: rules over analysis tables -> findings (what the data shows, its evidence,
and what to do). One module per probe (named in its registry entry, `findings(analyzed)`),
plus the run-level telemetry rules.

A finding never states what the data does not show: a rule that lacks its inputs (an unknown
GPU, no pair flagged) says nothing.

May import analysis, the predictor (predicted what-ifs) and the foundations; never torch.
"""
