"""Plans: plan files, sweeps, placeholders, routing to named backends, checks before a run."""
