"""Networks components: one module per registered type (see dsl.registry)."""
