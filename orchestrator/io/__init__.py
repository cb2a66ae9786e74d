"""What a run writes and reads back: storage paths, the run directory and its lock, checkpoints and the history in them, artifacts, schema creation."""
