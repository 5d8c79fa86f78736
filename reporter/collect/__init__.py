"""Collect: the target contract, the built-in targets, the runner (torch.profiler), the
memory profile and distributed runs. Produces a Run of Profiles."""
