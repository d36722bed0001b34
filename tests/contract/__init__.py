"""The provider contract suite: one set of cases, run against every Provider.

Each provider is reached through a harness (see ``conftest.py``); adding a
provider means adding one harness factory to ``HARNESS_FACTORIES``.
"""
