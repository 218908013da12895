"""Project memory: the guarded catalog, its schema, its intake and the engine's use of it."""
