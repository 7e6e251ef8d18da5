"""Written text before it is spoken: checks, limits and sentences, SSML, pauses, normalisation (English and Japanese),
writing systems, spans and the first-clause cut. Imports only ``base``.
"""
