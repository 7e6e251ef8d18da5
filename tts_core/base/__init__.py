"""What every wing shares: errors, the synthesis options, the device, float audio, a stored plan and word timing, and
the signal-safe stop. Imports nothing from the other wings.
"""
