"""The Wyoming TTS server (``ttsq wyoming``): Home Assistant's and other voice assistants' protocol,
each request an ordinary interactive job whose parts go out as ``audio-chunk`` events as they are made.
docs/WYOMING.md lists what is honoured."""
