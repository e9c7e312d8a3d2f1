"""Built-in drafters, one module per method. They are registered through the ``specbench.drafters``
entry-point group in pyproject.toml, the same path third-party packages use."""
