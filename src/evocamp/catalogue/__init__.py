"""The catalogue of algorithm types, built-in domains and families.

:mod:`~evocamp.catalogue.entries` defines what an algorithm type, a family and an
optional extra are, :mod:`~evocamp.catalogue.algorithms` lists every type (one entry
each, every family and extra declared beside its types, ``FAMILIES`` built from them;
the families from other libraries in :mod:`~evocamp.catalogue.libraries`),
:mod:`~evocamp.catalogue.domains` every built-in domain (one entry each, its evaluation
function in :mod:`evocamp.tasks`), and :mod:`~evocamp.catalogue.factory`
builds a run's optimizer (importing a plugin's class) and finds a domain's evaluation
function. Configuration validation, defaults, run specs, the schema's type lists and the
reference tables of ``docs/configuration.md`` all read the entries.
"""
