"""The run: the runner's tick loop and its parts (staging, submits, polls, holds, retries)."""
