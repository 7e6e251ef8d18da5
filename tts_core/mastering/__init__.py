"""Audio after the model: resampling, level metering, loudness (EBU R128), the true-peak limiter, leveling, codecs and
encoding into formats. Imports only ``base``.
"""
