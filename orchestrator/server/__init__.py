"""The coordinator and its side of a round: where its clients train, sampling, the simulated clock, aggregation, calibration, evaluation."""
