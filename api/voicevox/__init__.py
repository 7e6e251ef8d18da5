"""The VOICEVOX ENGINE-compatible HTTP API: VOICEVOX and AivisSpeech clients (read-aloud bots, video
tools, MCP servers) use ttsq's pool through the endpoints and shapes they already speak. Each
synthesis is an ordinary ttsq job (interactive priority, the tenant's limits and quotas)."""
