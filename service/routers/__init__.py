"""The ``/v1`` routers."""
