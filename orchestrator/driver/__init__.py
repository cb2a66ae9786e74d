"""One run's life cycle on the driver: set-up, the run directory, the round loop, a clean stop, the checks before a start."""
