"""The replay pool and what records into it.

Storage (:mod:`~vecpool.replay.pool`), its files, complete episodes, autoreset
boundaries, the wrapper, the classic ``Pool``, the Minari export and the one
settings object they share.
"""
