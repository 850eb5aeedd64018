"""Launching a sweep: the plan's command for each node (local torchrun, Slurm's srun, by hand
on each node), supervising the ranks with the live progress line, and finishing the run.

May import every stage below it (the rank side, to measure in place under torchrun; runs;
reports, to write the report at the end); only the commands import it."""
