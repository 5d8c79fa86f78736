"""Analyze: the Profile model and everything that reads it (step breakdown, FLOPs and
efficiency, rules and findings, what each is worth, what-ifs timed on the device). Imports
no other stage."""
