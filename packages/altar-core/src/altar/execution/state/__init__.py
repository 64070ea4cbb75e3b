"""A run's durable state: the journal, each task's records, the summary, and reading them back."""
