"""Backends place variables and communicate; they all share dsl.engine.loop."""
