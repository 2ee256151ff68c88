"""Shipped recipes that are more than a config: an agent and the examples it plays.

* ``lookup.py`` — an agent whose tool matters: a number drawn per episode that only ``lookup`` returns.
"""
