"""Persistence shared by the API and the workers: SQL records and the content-addressed artifact store.

This package imports no FastAPI: workers use it to load a job and store its results.
"""
