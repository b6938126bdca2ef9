"""Augmenters components: one module per registered type (see dsl.language.registry)."""
