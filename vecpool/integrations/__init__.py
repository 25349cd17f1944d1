"""Adapters from vecpool (and any Gymnasium ``VectorEnv``) to other RL libraries.

Each adapter lives in its own module and imports its library there, so importing
this package imports none of them: ``from vecpool.integrations.sb3 import
SB3VecEnv`` loads Stable-Baselines3 only when asked.
"""
