# The storetest plugin is registered by its pytest11 entry point (pip install -e .);
# this file only marks the repository root for pytest.
