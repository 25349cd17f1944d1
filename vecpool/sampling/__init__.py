"""Collection: the ``[T, B]`` sampler, ``vecpool collect``, and Ray scale-out."""
