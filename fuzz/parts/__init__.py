"""Shared parts: the pieces several families compose (activation checkpointing, tensor parallelism), each one
folder with its spec (plain data, torch- and Hypothesis-free), validity rules, strategy, torch functions and the
export's view of them.  Families import parts, never each other; parts import only generic modules."""
