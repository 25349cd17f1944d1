"""The replay pool and what records into it.

Storage (:mod:`~vecpool.replay.pool`, the facade over its parts: the sub-pool
ring, the storage kinds, writers, samplers, readers, the episode log), its files,
complete episodes, autoreset boundaries, the wrapper, the classic ``Pool``, the
Minari export and the one settings object they share.
"""
