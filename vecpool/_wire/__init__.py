"""What both sides of the process boundary share.

The channel (framing), the messages (commands, replies, start-up configuration),
remote error packing, the shared-memory layout and the spin-then-block wait.
"""
