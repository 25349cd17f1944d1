"""The child side: a worker process's loop and the envs it hosts.

Imports only :mod:`vecpool._wire` and :mod:`vecpool._util`, never the parent's
engine (``tests/unit/test_layout.py`` keeps it so).
"""
