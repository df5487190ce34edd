"""Owns the API's routers, one module per resource."""
