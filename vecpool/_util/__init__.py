"""Private helpers below every layer.

Space trees, argument validation, atomic files, progress, seeding and loading
``module:callable`` targets; none of them knows about processes.
"""
