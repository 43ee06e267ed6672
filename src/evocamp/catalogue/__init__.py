"""The catalogue of algorithm types and built-in domains.

:mod:`~evocamp.catalogue.entries` defines what an algorithm type is,
:mod:`~evocamp.catalogue.algorithms` lists every type (one entry each; built-in domains
declare their entries beside their functions, :mod:`evocamp.domains`), and
:mod:`~evocamp.catalogue.factory` builds a run's optimizer (importing a plugin's class).
Configuration validation, defaults, run specs, the schema's type lists and the reference
tables of ``docs/configuration.md`` all read the entries.
"""
