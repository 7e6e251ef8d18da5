"""The chaos soak (``make soak``): a whole ttsq stack of real processes under mixed load while a
seeded driver kills and freezes its parts, then a reckoning of every job, object and webhook.
docs/RELIABILITY.md, "Chaos soak", says what it does and how to run it."""
