"""The coordinator's side of a round: sampling, the simulated clock, aggregation, calibration, evaluation."""
