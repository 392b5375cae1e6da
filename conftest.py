"""Project-root conftest: enables pytester for the plugin's own tests (tests/plugin).

The qualification plugin itself is registered through the ``pytest11`` entry point in
pyproject.toml, so gates in ``suites/`` and users' own suites get it without a conftest.
"""

pytest_plugins = ["pytester"]
