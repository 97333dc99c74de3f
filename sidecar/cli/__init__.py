"""The ``shadowtrial`` command: ``main`` parses and dispatches; each command family is a module."""
