"""The qualification gates. In the wheel this directory is the package ``pytest_vllmqual.suites``:
``pytest --pyargs pytest_vllmqual.suites --recipe=NAME|PATH`` runs them from any directory."""
