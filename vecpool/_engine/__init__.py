"""The parent side of the process boundary.

Worker handles (one file per kind), start-up, the group and its one wait loop,
restart, step buffers, ``send``/``recv`` batches, env states, guards and lifecycle.
"""
