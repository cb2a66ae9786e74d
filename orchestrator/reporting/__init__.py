"""What a user sees and keeps: MLflow tracking, results, progress, plots, a run's artifacts, HTML reports."""
