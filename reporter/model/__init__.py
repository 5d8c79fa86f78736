"""The data floor: the records every stage speaks, with no logic above arithmetic.

``profile`` (the Profile of one profiled mode: its operators, steps, costs), ``run``
(a Run of a target, its Sections, throughput and memory), ``finding`` (Finding and
Saving), ``stats`` (intervals and outliers) and ``contention`` (whether a measurement
was disturbed). They import nothing of reporter's but each other."""
