"""Pronunciation lexicons: PLS documents and entries, matching them in text, the spoken form they make, and compiled
Japanese user dictionaries. Imports ``base`` and ``text``.
"""
