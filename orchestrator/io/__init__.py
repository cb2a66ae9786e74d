"""What a run writes and reads back, whatever the run: storage paths, locks, checkpoints and the history in them, client state files, schema creation."""
