"""The project's own tests (a package, so ``tests.broken_stores`` is importable by
``storetest check``)."""
