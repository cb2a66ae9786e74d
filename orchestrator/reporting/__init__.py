"""What a user sees and keeps: MLflow tracking, results, progress, profiles, plots, HTML reports."""
