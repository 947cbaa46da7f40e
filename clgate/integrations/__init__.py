"""Outward bridges of a verdict: MLflow (tracking and model registry) and signed webhooks.

Each needs its own optional extra (``clgate[mlflow]``) and is imported only when used.
"""
