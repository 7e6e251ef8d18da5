"""What is heard when: sentence, word, phoneme, viseme and SSML marks, and subtitles. Imports ``base`` and ``text``."""
