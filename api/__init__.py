"""The HTTP API: accepts synthesis jobs, reports their status, hands out presigned audio URLs."""
