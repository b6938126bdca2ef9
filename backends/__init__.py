"""Backends place variables and communicate; they all drive the one loop of dsl.engine.runner."""
