"""The unit tests, laid out like the package: the tests of ``pytest_vllmqual/report/decision.py``
are ``report/test_decision.py``. Each folder is a package, so two folders may hold a test file of
the same name."""
