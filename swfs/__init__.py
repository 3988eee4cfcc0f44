"""swfs: a versioned workspace filesystem for AI agents."""
