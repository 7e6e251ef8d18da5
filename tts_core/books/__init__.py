"""Books read into chapters for narration: a ``.txt``, ``.md`` or ``.epub`` file's bytes, read the same
way for ``ttsq narrate`` (which reads the file, or a folder of chapter files, on the operator's
machine) and for the API (which reads an upload, never a path). Imports ``base`` and ``text``.

Chapter text is plain: paragraphs separated by one blank line (they become paragraph pauses),
lines inside a paragraph kept, markup dropped. Chapters with nothing to say (an empty file, one of
only punctuation) are left out; so are, in a file or an EPUB, those without a sentence (a cover, a
title page, a table of contents) while the book has others. ``Book.left_out`` names each part left
out and says why.

One module per format: ``text``, ``markdown``, ``epub``; what they share is in ``common``, and
``reading`` chooses the reader by the file's name.
"""
