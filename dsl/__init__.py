"""dslrun: declarative training pipelines."""

__version__ = "0.1.0"
