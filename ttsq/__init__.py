"""ttsq service layer shared by the API and the workers (settings, job records, storage) and the CLI."""
