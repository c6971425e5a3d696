"""RL front end: a RolloutScheduler that hands a trainer batches of grouped trajectories."""
