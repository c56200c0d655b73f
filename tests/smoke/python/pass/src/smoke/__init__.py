"""Sunaba smoke project (python, passing)."""
