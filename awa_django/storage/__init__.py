"""The storage layer: the models that own every table, the named hot-path SQL and the typed
functions that run it on Django's connection or the runtime's."""
