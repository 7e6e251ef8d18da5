"""Audio after the model: resampling, level metering, loudness (EBU R128), the true-peak limiter, leveling, codecs,
encoding into formats, and ``.m4b`` audiobooks with chapter marks. Imports only ``base``.
"""
