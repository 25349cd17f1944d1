"""The vector env itself: ``AsyncVectorEnv`` and ``make_vec``.

See :mod:`vecpool.vector.async_env` and :mod:`vecpool.vector.make`.
"""
