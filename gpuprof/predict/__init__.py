"""The scaling predictor: alpha-beta fits of the measured collectives, the collective models,
DDP and pipeline what-ifs on other shapes and hardware, and their text.

May import analysis, specs, machine facts and the foundations; never torch."""
