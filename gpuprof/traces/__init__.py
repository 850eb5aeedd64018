"""A real job's torch.profiler traces: read each rank's file as a stream, reduce it to steps,
host ops, device activity and collectives, then per rank and step the time breakdown, and
across ranks every collective's wait and transfer and the rank that holds the others back.

May import analysis (intervals), specs, machine facts and the foundations; never torch."""
